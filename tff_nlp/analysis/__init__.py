"""Static analyses of TFF computations (what crosses from clients to server)."""

from tff_nlp.analysis.client_flows import client_to_server_flows
from tff_nlp.analysis.client_flows import ClientFlow
