// Package console holds Manta's web console: plain HTML, CSS and JavaScript modules, with no build step and no
// dependency (docs/architecture.md says why), embedded in the binary and served by `manta apiserver` under
// /console/. The data it shows comes from the API server's /console/api/ endpoints (internal/apiserver/console.go).
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the console's files under /console/. The pages hold no data, so they need no token; the headers
// keep them from being framed or run with scripts from anywhere else.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is there by construction
	}
	files := http.StripPrefix("/console/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		// The files change with the binary, which carries no version in their names: the browser asks again.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
