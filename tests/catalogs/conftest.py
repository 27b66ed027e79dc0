from tests.catalogs.helpers import shop  # noqa: F401
