package workspace

import (
	"path/filepath"

	"github.com/fastagent/fastagent/internal/secretenv"
	"github.com/fastagent/fastagent/internal/tools"
)

// RulePaths are the paths, relative to the workspace, that define what the
// agent may do: its configuration, tool manifests, channels, schedules,
// state, secrets and version history. The agent's own tools never write
// them (write and edit refuse; the bash sandbox mounts them read-only).
var RulePaths = []string{ConfigFile, "tools", "channels", "schedules", ".fastagent", ".env", ".git"}

// SelfEditPaths are the paths, relative to the agent dir, that shape the
// agent's prompt; they are writable by the agent only with selfEdit: true.
var SelfEditPaths = []string{"persona.md", "AGENTS.md", "skills"}

// ProtectedPaths returns the absolute paths the agent's tools must not
// write in ws: RulePaths under both the working directory and the agent
// dir, plus SelfEditPaths unless selfEdit is set. It is the one list the
// write and edit tools and the bash sandbox share.
func ProtectedPaths(ws Workspace, selfEdit bool) []tools.Protected {
	dirs := []string{ws.Dir}
	if ws.AgentDir != "" && ws.AgentDir != ws.Dir {
		dirs = append(dirs, ws.AgentDir)
	}
	var out []tools.Protected
	seen := map[string]bool{}
	add := func(p, reason string) {
		if p = filepath.Clean(p); !seen[p] {
			seen[p] = true
			base := filepath.Base(p)
			out = append(out, tools.Protected{Path: p, Reason: reason, Secret: base == ".fastagent" || base == ".env"})
		}
	}
	for _, d := range dirs {
		for _, rel := range RulePaths {
			add(filepath.Join(d, rel), ruleReason(rel))
		}
	}
	if !selfEdit {
		for _, d := range dirs {
			for _, rel := range SelfEditPaths {
				add(filepath.Join(d, rel), "it shapes the agent's own prompt, and selfEdit is not enabled in "+ConfigFile)
			}
		}
	}
	return out
}

func ruleReason(rel string) string {
	switch rel {
	case ConfigFile:
		return "it is the agent's configuration (models, approvals, tools, MCP servers)"
	case "tools", "channels", "schedules":
		return "it defines the agent's " + rel
	case ".fastagent":
		return "it is the runtime's state directory"
	case ".env":
		return "it holds the operator's secrets"
	case ".git":
		return "it is the repository's history and hooks"
	}
	return "it is part of the agent's definition"
}

// IsSecretEnv reports whether name looks like one of the worker's own
// secrets (secretenv.IsSecret): such names are kept from tools unless
// allowSecretEnv lists them.
func IsSecretEnv(name string) bool { return secretenv.IsSecret(name) }
