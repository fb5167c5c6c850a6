package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/fastagent/fastagent/internal/secretenv"
	"github.com/fastagent/fastagent/internal/tools"
)

// RulePaths are the paths, relative to the workspace, that define what the
// agent may do: its configuration, tool manifests, channels, schedules,
// state, secrets and version history. The agent's own tools never write
// them (write and edit refuse; the tool sandbox keeps them read-only).
var RulePaths = []string{ConfigFile, "tools", "hooks", "channels", "schedules", ".fastagent", ".env", ".git"}

// SelfEditPaths are the paths, relative to the agent dir, that shape the
// agent's prompt; they are writable by the agent only with selfEdit: true.
var SelfEditPaths = []string{"persona.md", "AGENTS.md", "skills"}

// ProtectedPaths returns the absolute paths the agent's tools must not
// write in ws — the one list the write and edit tools and the tool sandbox
// share:
//   - what the loader reads (fastagent.yaml in the agent dir and the
//     workspace, tools/, hooks/, channels/, schedules/, and unless selfEdit is on
//     persona.md, AGENTS.md, skills/, the workspace's AGENTS.md) and .git:
//     protected whether or not they exist — the sandbox creates a missing
//     one empty, so that no tool can create it;
//   - the same names where the loader does not read them: protected when
//     they exist;
//   - the state dir .fastagent and .env: not readable either (Secret),
//     created owner-only before a tool runs.
func ProtectedPaths(ws Workspace, selfEdit bool) []tools.Protected {
	agent := ws.agentDir()
	var out []tools.Protected
	seen := map[string]bool{}
	add := func(p string, e tools.Protected) {
		if p = filepath.Clean(p); !seen[p] {
			seen[p] = true
			e.Path = p
			out = append(out, e)
		}
	}
	rule := func(dir, rel string, isDir, ifExists bool) {
		add(filepath.Join(dir, rel), tools.Protected{Reason: ruleReason(rel), Dir: isDir, IfExists: ifExists})
	}
	selfEdit0 := "it shapes the agent's own prompt, and selfEdit is not enabled in " + ConfigFile
	// Read by the loader.
	rule(agent, ConfigFile, false, false)
	rule(ws.Dir, ConfigFile, false, false)
	for _, d := range []string{ToolsDir, HooksDir, ChannelsDir, SchedulesDir} {
		rule(agent, d, true, false)
	}
	rule(ws.Dir, ".git", true, false)
	if !selfEdit {
		add(filepath.Join(agent, "persona.md"), tools.Protected{Reason: selfEdit0})
		add(filepath.Join(agent, "AGENTS.md"), tools.Protected{Reason: selfEdit0})
		add(filepath.Join(agent, "skills"), tools.Protected{Reason: selfEdit0, Dir: true})
		add(filepath.Join(ws.Dir, "AGENTS.md"), tools.Protected{Reason: selfEdit0})
	}
	// Secret, wherever they are: made (owner-only) before a tool runs, so
	// that no tool makes them first.
	for _, p := range SecretPaths(ws) {
		rel := filepath.Base(p)
		add(p, tools.Protected{Reason: ruleReason(rel), Secret: true, Dir: rel == StateDirName})
	}
	// The same names where they are not read: protected when present.
	for _, d := range []string{ws.Dir, agent} {
		for _, rel := range RulePaths {
			rule(d, rel, rel != ConfigFile && rel != ".env", true)
		}
		if !selfEdit {
			for _, rel := range SelfEditPaths {
				add(filepath.Join(d, rel), tools.Protected{Reason: selfEdit0, Dir: rel == "skills", IfExists: true})
			}
		}
	}
	return out
}

// Names of the secrets file and the state dir of a workspace or agent dir.
const (
	EnvFile      = ".env"
	StateDirName = ".fastagent"
)

// SecretPaths are the secrets files and state dirs of ws (in the workspace
// and in the agent dir): no tool reads them, and the runtime makes them,
// owner-only, before any tool could.
func SecretPaths(ws Workspace) []string {
	var out []string
	for _, d := range []string{ws.Dir, ws.agentDir()} {
		for _, rel := range []string{StateDirName, EnvFile} {
			if p := filepath.Join(d, rel); !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func ruleReason(rel string) string {
	switch rel {
	case ConfigFile:
		return "it is the agent's configuration (models, approvals, tools, MCP servers)"
	case "tools", "hooks", "channels", "schedules":
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

// OthersPaths is ws's protected list as another agent of the same worker
// must see it: every rule path, secrets file and state dir of ws that
// exists, none of them to be changed (nor the secret ones read) by that
// other agent's tools.
func OthersPaths(ws Workspace) []tools.Protected {
	out := ProtectedPaths(Resolve(ws), false)
	for i := range out {
		out[i].IfExists = true
		out[i].Reason = "it belongs to another agent this worker serves (" + out[i].Reason + ")"
	}
	return out
}

// Resolve returns ws with its agent dir: AgentDir when set, else the
// workspace config's agentDir, else the workspace. A config that does not
// load leaves it unset (Loader.Load reports the problem).
func Resolve(ws Workspace) Workspace {
	if ws.AgentDir != "" {
		return ws
	}
	if cfg, err := loadConfig(ws.Dir, nil); err == nil && cfg.AgentDir != "" {
		ws.AgentDir = resolveUnder(ws.Dir, cfg.AgentDir)
	}
	return ws
}

// EnsureSecrets makes ws's secrets files and state dirs (SecretPaths) that
// do not exist yet, owner-only: an empty .env (0600) and an empty
// .fastagent (0700), so that no tool makes them first.
func EnsureSecrets(ws Workspace) error {
	for _, p := range SecretPaths(Resolve(ws)) {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if _, err := os.Stat(filepath.Dir(p)); err != nil {
			continue // the folder itself is missing: the load reports it
		}
		var err error
		if filepath.Base(p) == StateDirName {
			err = os.Mkdir(p, 0o700)
		} else {
			var f *os.File
			if f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
				err = f.Close()
			}
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("workspace: create %s before any tool can: %w", p, err)
		}
	}
	return nil
}
