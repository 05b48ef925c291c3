package devcluster

import (
	"bytes"
	"embed"
	"io/fs"
	"sort"
)

//go:embed pullerstages/*.yaml
var pullerStageFiles embed.FS

// PullerStages are the kwok Stage documents that make ImagePullJob's puller pods (label manta.dev/image-puller)
// behave on fake nodes: a Running puller pod exits (Succeeded), and a puller pod whose image contains
// "does-not-exist" or "unauthorized" fails its pull with ErrImagePull (message "... not found" or "... 401
// Unauthorized"). Options.ExtraStages takes them where a cluster runs ImagePullJobs on kwok nodes.
var PullerStages = loadPullerStages()

func loadPullerStages() []byte {
	names, err := fs.Glob(pullerStageFiles, "pullerstages/*.yaml")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	var docs [][]byte
	for _, n := range names {
		b, err := pullerStageFiles.ReadFile(n)
		if err != nil {
			panic(err)
		}
		docs = append(docs, bytes.TrimSpace(b))
	}
	return append(bytes.Join(docs, []byte("\n---\n")), '\n')
}
