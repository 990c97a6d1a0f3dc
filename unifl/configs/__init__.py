"""Configuration: a party's YAML (backend, fallback, devices, network), validated on load; a job's
YAML is validated by ``unifl.app.params`` with the algorithms it names.  Example files for every
backend ship beside this module (``example_path('host_qat')``)."""

from .load import EXAMPLES_DIR, example_path, load_party, read_yaml, resolve, validate
from .schema import ROLES, NetworkSection, PartyConfig, RaySection, TlsSection, backend_names

__all__ = ["PartyConfig", "NetworkSection", "RaySection", "TlsSection", "load_party", "read_yaml",
           "validate", "resolve", "example_path", "EXAMPLES_DIR", "ROLES", "backend_names"]
