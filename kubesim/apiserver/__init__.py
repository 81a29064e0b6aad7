"""The simulated kube-apiserver: see :mod:`kubesim.apiserver.server` for the request path."""

from .authz import User
from .client import LocalClient
from .errors import ApiError
from .server import ApiRequest, ApiServer

__all__ = ["ApiError", "ApiRequest", "ApiServer", "LocalClient", "User"]
