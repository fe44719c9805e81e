"""The server's HTTP routes, one APIRouter per concern (accounts, intake, views, admin), included by
grader.server.app.create_app; web.py is what they share. They only translate to and from HTTP: what they do is
the concern's module of grader.server."""
