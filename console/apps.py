from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Gavel console"

    def ready(self):
        # Socket hygiene: sign-out and deactivation close the user's sockets (receivers there).
        from console import checks, realtime  # noqa: F401
