"""The one report schema, its rendering, the comparison of all artifacts, the HTML page and the production pick (select)."""
