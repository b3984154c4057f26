"""The web console's static assets (index.html, app.js, style.css), served at `/console` by
`seglog.http.console`. Plain files: vanilla JavaScript, no build step, nothing fetched from
elsewhere."""
