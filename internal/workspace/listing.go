package workspace

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Folders of the agent dir that other parts of fastagent read.
const (
	ChannelsDir  = "channels"
	SchedulesDir = "schedules"
)

// FileEntry is one file (or folder) of channels/ or schedules/.
type FileEntry struct {
	// Name is the file name without its extension (and without .disabled).
	Name string `json:"name"`
	Path string `json:"path"`
	// Enabled is false for a *.disabled file.
	Enabled bool `json:"enabled"`
}

// Channels lists channels/ of the agent dir: a file enables a channel,
// a *.disabled one is listed as off.
func (w Workspace) Channels() []FileEntry {
	return listEntries(filepath.Join(w.agentDir(), ChannelsDir))
}

// Schedules lists schedules/ of the agent dir.
func (w Workspace) Schedules() []FileEntry {
	return listEntries(filepath.Join(w.agentDir(), SchedulesDir))
}

func (w Workspace) agentDir() string {
	if w.AgentDir != "" {
		return w.AgentDir
	}
	return w.Dir
}

func listEntries(dir string) []FileEntry {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []FileEntry
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue
		}
		f := FileEntry{Path: filepath.Join(dir, name), Enabled: true}
		if base, ok := strings.CutSuffix(name, ".disabled"); ok {
			f.Enabled = false
			name = base
		}
		if !e.IsDir() {
			name = strings.TrimSuffix(name, filepath.Ext(name))
		}
		f.Name = name
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
