from console import access


def console(request):
    """The signed-in principal (or None) for the base layout's navigation."""
    principal = access.principal_for_user(getattr(request, "user", None))
    return {"viewer": principal}
