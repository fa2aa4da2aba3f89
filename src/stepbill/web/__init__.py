"""`stepbill serve`: a local web explorer — JSON API over the library (api.py, app.py) and one page (static/)."""
