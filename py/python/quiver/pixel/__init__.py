"""numpy ports of the pixel-chain steps (same products as the Rust steps)."""

from .beamspot import BeamSpot
from .clusterize import ChargeCut, Clusterize
from .rechits import RecHits
from .vertices import Vertices

__all__ = ["BeamSpot", "ChargeCut", "Clusterize", "RecHits", "Vertices"]
