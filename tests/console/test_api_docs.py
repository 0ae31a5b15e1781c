"""`/api/v1/docs` (issue 18, item 6): Swagger UI from django-ninja's bundled copy, served by
WhiteNoise from our own origin. The page under the production settings (DEBUG off) references
only same-origin assets that exist, and nothing in it needs the CSP loosened: no inline script
(the settings ride in a `type="application/json"` data block, read by ninja's own init file)
and no inline style."""

import json
from html.parser import HTMLParser

import pytest

from console.middleware import CSP

DOCS = "/api/v1/docs"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.assets: list[str] = []  # every src= and href= on the page
        self.scripts: list[dict] = []  # the attributes of every <script>
        self.inline_styles = 0  # <style> elements and style= attributes
        self.settings_json = ""
        self._in_settings = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href"):
            if attrs.get(name):
                self.assets.append(attrs[name])
        if "style" in attrs or tag == "style":
            self.inline_styles += 1
        if tag == "script":
            self.scripts.append(attrs)
            self._in_settings = attrs.get("id") == "swagger-settings"

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_settings = False

    def handle_data(self, data):
        if self._in_settings:
            self.settings_json += data


def _body(response) -> bytes:
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


@pytest.fixture
def docs_page(client, settings):
    settings.DEBUG = False
    response = client.get(DOCS)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = _Page()
    page.feed(response.content.decode())
    return response, page


def test_the_docs_page_is_under_the_production_csp(docs_page):
    response, _ = docs_page
    assert response["Content-Security-Policy"] == CSP
    assert "script-src 'self';" in CSP and "style-src 'self';" in CSP  # nothing inline


def test_the_docs_page_has_no_inline_script_or_style(docs_page):
    _, page = docs_page
    assert page.inline_styles == 0
    assert len(page.scripts) == 3
    for script in page.scripts:
        # an external file, or a data block the browser never runs (the Swagger settings)
        assert script.get("src") or script.get("type") == "application/json", script
    assert json.loads(page.settings_json)["url"] == "/api/v1/openapi.json"


def test_every_asset_the_docs_page_references_is_ours_and_exists(client, docs_page):
    _, page = docs_page
    wanted = {
        "/static/ninja/swagger-ui.css": "text/css",
        "/static/ninja/swagger-ui-bundle.js": "text/javascript",
        "/static/ninja/swagger-ui-init.js": "text/javascript",
    }
    assert set(wanted) <= set(page.assets)
    for url in page.assets:
        assert url.startswith("/") and not url.startswith("//"), f"not same-origin: {url}"
        answer = client.get(url)
        assert answer.status_code == 200, url
        body = _body(answer)
        assert len(body) > 500, url
        if url in wanted:
            assert answer["Content-Type"].startswith(wanted[url]), (url, answer["Content-Type"])
    bundle = _body(client.get("/static/ninja/swagger-ui-bundle.js"))
    assert b"SwaggerUIBundle" in bundle
    assert b"cdn.jsdelivr.net" not in _body(client.get(DOCS))


def test_the_schema_the_docs_page_loads_is_served(client, docs_page):
    _, page = docs_page
    schema = client.get(json.loads(page.settings_json)["url"])
    assert schema.status_code == 200
    assert schema.json()["info"]["title"] == "Gavel API"
    assert "/api/v1/runs" in schema.json()["paths"]
