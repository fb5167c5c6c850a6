package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// ToolHash returns a digest of everything that decides what calling the
// tool name does: its spec as the model sees it (with requiresApproval,
// timeout and the like), where it comes from, its fastagent.yaml settings,
// the env it is given, and for a workspace tool its manifest's bytes, for an
// MCP tool its server's configuration. An approval is bound to this digest,
// so an approved call never runs a definition that changed after the human
// saw it. ok is false when there is no such tool.
func (d *Definition) ToolHash(name string) (hash string, ok bool) {
	var entry *ToolEntry
	for i := range d.Tools {
		if d.Tools[i].Tool.Spec().Name == name {
			entry = &d.Tools[i]
			break
		}
	}
	if entry == nil {
		return "", false
	}
	in := struct {
		Origin   string          `json:"origin"`
		Spec     any             `json:"spec"`
		Config   ToolConfig      `json:"config"`
		Env      []string        `json:"env,omitempty"`
		Manifest []byte          `json:"manifest,omitempty"`
		Server   *MCPServer      `json:"server,omitempty"`
		Extra    json.RawMessage `json:"extra,omitempty"`
	}{Origin: entry.Origin, Spec: entry.Tool.Spec(), Config: d.Config.Tools[name], Env: d.Config.Env}
	switch {
	case strings.HasPrefix(entry.Origin, OriginWorkspace):
		rel := strings.TrimPrefix(entry.Origin, OriginWorkspace)
		b, err := os.ReadFile(filepath.Join(d.Workspace.AgentDir, filepath.FromSlash(rel)))
		if err != nil {
			b = []byte("unreadable: " + err.Error())
		}
		in.Manifest = b
	case strings.HasPrefix(entry.Origin, OriginMCP):
		if s, ok := d.Config.MCPServers[strings.TrimPrefix(entry.Origin, OriginMCP)]; ok {
			in.Server = &s
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), true
}
