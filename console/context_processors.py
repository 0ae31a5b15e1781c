from console.directory import access


def console(request):
    """The signed-in principal (or None) for the base layout's navigation, and every tenant
    the login may act in (the tenant switcher shows when there are several)."""
    if not hasattr(request, "user"):
        return {"viewer": None, "viewer_principals": []}
    return {
        "viewer": access.principal_for_user(request),
        "viewer_principals": access.principals_for_request(request),
    }
