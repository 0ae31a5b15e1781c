from django.contrib import admin

from console.models import ApiKey, AuditEvent, Principal, Role, Team, Tenant

admin.site.register([Tenant, Team, Role])


@admin.register(Principal)
class PrincipalAdmin(admin.ModelAdmin):
    list_display = ["external_id", "tenant", "name", "is_active", "reviewed"]
    list_filter = ["tenant", "is_active", "reviewed"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["key_prefix", "name", "tenant", "scopes", "last_used_at", "revoked_at"]
    exclude = ["key_hash"]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the log is append-only (no add, change or delete, no bulk actions)."""

    list_display = ["at", "tenant", "action", "object_type", "object_id", "actor_rule", "ip"]
    list_filter = ["tenant", "action"]
    actions = None

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
