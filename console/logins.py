"""The authentication backend's stable dotted path: sessions store "console.logins.LoginBackend"
(settings.AUTHENTICATION_BACKENDS), so the path outlives the move to console.directory.logins;
changing it would sign every session out."""

from console.directory.logins import LoginBackend

__all__ = ["LoginBackend"]
