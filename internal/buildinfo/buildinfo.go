// Package buildinfo tells which fastagent this binary is: its version, the
// build ID (the commit it was built from), and the Temporal SDK and Go
// versions linked in, from the module build info and link-time flags. (No
// Temporal server is linked: `fastagent dev` runs the fastagent-devserver
// program.)
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Set at link time, never at run time:
//
//	go build -ldflags "-X github.com/fastagent/fastagent/internal/buildinfo.version=v1.4.0 \
//	  -X github.com/fastagent/fastagent/internal/buildinfo.buildID=$(git rev-parse HEAD)"
var (
	version string
	buildID string
)

// sdkModule is the module whose version is reported.
const sdkModule = "go.temporal.io/sdk"

// Info is what `fastagent version` prints.
type Info struct {
	// Version is the -ldflags version, else the module version ("(devel)"
	// for a build from a work tree).
	Version string `json:"version"`
	// BuildID is the -ldflags build ID, else the VCS revision (with
	// "-dirty" for uncommitted changes), else "unknown".
	BuildID string `json:"buildId"`
	// SDK is the Temporal SDK's version.
	SDK string `json:"temporalSdk"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
}

// Read returns this binary's Info.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi, version, buildID)
}

// From derives Info from build info (nil: unknown) and the link-time
// version and build ID ("" when not set).
func From(bi *debug.BuildInfo, ldVersion, ldBuildID string) Info {
	info := Info{Version: ldVersion, BuildID: ldBuildID}
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if info.BuildID == "" {
		info.BuildID = settings["vcs.revision"]
		if info.BuildID != "" && settings["vcs.modified"] == "true" {
			info.BuildID += "-dirty"
		}
	}
	if info.BuildID == "" {
		info.BuildID = "unknown"
	}
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil {
			v = d.Replace.Version + " (replaces " + d.Version + ")"
		}
		if d.Path == sdkModule {
			info.SDK = v
		}
	}
	info.Go = bi.GoVersion
	return info
}

// String is the human-readable form, one "name value" per line.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fastagent        %s\n", i.Version)
	fmt.Fprintf(&b, "build            %s\n", i.BuildID)
	fmt.Fprintf(&b, "temporal sdk     %s\n", orNone(i.SDK))
	fmt.Fprintf(&b, "go               %s\n", orNone(i.Go))
	return b.String()
}

func orNone(v string) string {
	if v != "" {
		return v
	}
	return "unknown"
}
