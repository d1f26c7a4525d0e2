"""numpy ports of the pixel-chain steps (same products as the Rust steps)."""

from .clusterize import Clusterize, ChargeCut
from .vertices import Vertices
from .beamspot import BeamSpot
from .rechits import RecHits
