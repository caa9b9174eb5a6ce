"""Link extraction from HTML and the parser worker's side of the parse stage."""
