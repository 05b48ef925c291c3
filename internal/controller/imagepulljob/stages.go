package imagepulljob

import (
	"bytes"
	"embed"
	"io/fs"
	"sort"
)

//go:embed stages/*.yaml
var stageFiles embed.FS

// KwokStages are the kwok Stage documents that make puller pods behave on fake nodes: a Running puller pod exits
// (Succeeded), and a puller pod whose image contains "does-not-exist" or "unauthorized" fails its pull with
// ErrImagePull (message "... not found" or "... 401 Unauthorized"). The dev cluster loads them with its own stages.
var KwokStages = loadStages()

func loadStages() []byte {
	names, err := fs.Glob(stageFiles, "stages/*.yaml")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	var docs [][]byte
	for _, n := range names {
		b, err := stageFiles.ReadFile(n)
		if err != nil {
			panic(err)
		}
		docs = append(docs, bytes.TrimSpace(b))
	}
	return append(bytes.Join(docs, []byte("\n---\n")), '\n')
}
