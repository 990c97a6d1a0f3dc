"""``unifl.paillier``: see :mod:`unifl.phe_sdk.paillier`."""
from .phe_sdk.paillier import *  # noqa: F401,F403
from .phe_sdk.paillier import __all__  # noqa: F401
