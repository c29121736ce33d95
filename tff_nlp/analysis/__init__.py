"""Static analyses of TFF computations: what crosses between clients and server.

`client_to_server_flows`: every value that leaves the clients, by intrinsic.
`round_communication`: the bytes one client downloads and uploads per round.
`privacy`: the (ε, δ) of a differentially private training (`dp_accounting`).
"""

from tff_nlp.analysis.client_flows import client_to_server_flows
from tff_nlp.analysis.client_flows import ClientFlow
from tff_nlp.analysis.communication import round_communication
from tff_nlp.analysis.communication import RoundCommunication
from tff_nlp.analysis.communication import Transfer
from tff_nlp.analysis.communication import type_bytes
from tff_nlp.analysis import privacy
