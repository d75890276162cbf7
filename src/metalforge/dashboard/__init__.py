"""The dashboard's static files (``static/``), served by ``api.routes.dashboard``."""
