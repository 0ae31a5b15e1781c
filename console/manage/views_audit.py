"""/manage/ pages (see console/manage/__init__.py)."""

urlpatterns: list = []
