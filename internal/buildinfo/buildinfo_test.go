package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	t.Parallel()
	deps := []*debug.Module{
		{Path: "go.temporal.io/sdk", Version: "v1.41.1"},
		{Path: "go.temporal.io/server", Version: "v1.31.2"},
		{Path: "github.com/spf13/cobra", Version: "v1.10.2"},
	}
	tests := []struct {
		name        string
		bi          *debug.BuildInfo
		ldV, ldB    string
		want        Info
		wantInLines []string
	}{
		{
			name: "work tree build with VCS stamp",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Deps: deps,
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			want: Info{Version: "(devel)", BuildID: "abc123-dirty", SDK: "v1.41.1", Go: "go1.26.8"},
		},
		{
			name: "link-time flags win",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-x"}, Deps: deps,
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}},
			ldV: "v1.4.0", ldB: "build-7",
			want: Info{Version: "v1.4.0", BuildID: "build-7", SDK: "v1.41.1", Go: "go1.26.8"},
		},
		{
			name: "no VCS stamp",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Deps: deps[:1]},
			want: Info{Version: "(devel)", BuildID: "unknown", SDK: "v1.41.1", Go: "go1.26.8"},
		},
		{
			name:        "no build info",
			want:        Info{Version: "(devel)", BuildID: "unknown"},
			wantInLines: []string{"temporal sdk     unknown", "go               unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := From(tt.bi, tt.ldV, tt.ldB)
			if got != tt.want {
				t.Fatalf("From = %+v, want %+v", got, tt.want)
			}
			for _, l := range tt.wantInLines {
				if !strings.Contains(got.String(), l) {
					t.Errorf("String() lacks %q:\n%s", l, got)
				}
			}
		})
	}
}

// Read reports the running test binary (which links no Temporal module).
func TestRead(t *testing.T) {
	t.Parallel()
	i := Read()
	if !strings.HasPrefix(i.Go, "go") || i.Version == "" || i.BuildID == "" {
		t.Fatalf("Read = %+v, want the Go version and a version and build ID", i)
	}
}
