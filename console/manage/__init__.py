"""The `/manage/` pages (admin): principals, roles, teams, keys, webhooks, settings, audit.

Each module holds the views of its tabs and a `urlpatterns` list; they call the same services
and selectors as the management API, never a query or a write of their own.
"""
