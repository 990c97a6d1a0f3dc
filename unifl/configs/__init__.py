"""Configuration: a party's YAML (backend, fallback, devices, network) and a job's YAML, validated on
load.  Example files for every backend ship beside this module (``example_path('host_qat')``)."""

from .load import EXAMPLES_DIR, example_path, load_job, load_party, resolve, validate
from .schema import (ALGORITHMS, DATASETS, KNOWN_BACKENDS, ROLES, JobConfig, NetworkSection,
                     PartyConfig, TlsSection)

__all__ = ["PartyConfig", "JobConfig", "NetworkSection", "TlsSection", "load_party", "load_job",
           "validate", "resolve", "example_path", "EXAMPLES_DIR", "ROLES", "KNOWN_BACKENDS",
           "ALGORITHMS", "DATASETS"]
