"""``tool-boundary web``: runs, their calls and each call's record in a browser.

A small Starlette app (served by uvicorn, Jinja2 templates, one stylesheet and a few lines of
JavaScript shipped here, nothing from the network). Every page works without JavaScript; the
script only moves a run's progress bars as server-sent events arrive. Needs the ``web``
extra (``pip install 'tool-boundary[web]'``): nothing is imported here, so the CLI loads
without it; ``tasks.web.app.create_app`` builds the app.
"""
