"""Drafters: the candidate generators behind one interface (see base.py)."""

from specdec.drafters.base import DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.drafters.model import ModelDrafter, layer_skip_drafter
from specdec.drafters.ngram import NgramDrafter

__all__ = ["DraftBlock", "DraftRequest", "DraftSession", "Drafter", "ModelDrafter", "NgramDrafter", "layer_skip_drafter"]
