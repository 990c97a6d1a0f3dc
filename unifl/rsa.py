"""``unifl.rsa``: see :mod:`unifl.phe_sdk.rsa`."""
from .phe_sdk.rsa import *  # noqa: F401,F403
from .phe_sdk.rsa import __all__  # noqa: F401
