"""The console's URLs with Django admin routed, as GAVEL_DJANGO_ADMIN=1 routes it (for
`@pytest.mark.urls`: the setting is read once, when console.urls is imported)."""

from console.urls import django_admin
from console.urls import urlpatterns as console_urlpatterns

urlpatterns = [*django_admin, *console_urlpatterns]
