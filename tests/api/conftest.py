from tests.api.fixtures import server  # noqa: F401
