package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/internal/channels"
	_ "github.com/fastagent/fastagent/internal/channels/feishu"   // the feishu and lark kinds
	_ "github.com/fastagent/fastagent/internal/channels/github"   // the github kind
	_ "github.com/fastagent/fastagent/internal/channels/slack"    // the slack kind
	_ "github.com/fastagent/fastagent/internal/channels/telegram" // the telegram kind
	"github.com/fastagent/fastagent/internal/channels/webhook"    // channels/webhooks/
	"github.com/fastagent/fastagent/internal/mcp"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/workspace"
)

// infoReport is what fastagent info --json prints.
type infoReport struct {
	Model        infoModel              `json:"model"`
	Dir          string                 `json:"dir"`
	AgentDir     string                 `json:"agentDir"`
	ConfigFile   string                 `json:"configFile,omitempty"`
	ContextFiles []string               `json:"contextFiles"`
	Skills       []infoSkill            `json:"skills"`
	Tools        []infoTool             `json:"tools"`
	Hooks        []infoHook             `json:"hooks"`
	MCPServers   []infoMCPServer        `json:"mcpServers"`
	Collisions   []workspace.Collision  `json:"collisions"`
	Channels     []infoChannel          `json:"channels"`
	Schedules    []workspace.FileEntry  `json:"schedules"`
	Diagnostics  []workspace.Diagnostic `json:"diagnostics"`
	// Sandbox is how tool processes are confined on this machine.
	Sandbox *sandbox.Status `json:"sandbox,omitempty"`
}

// infoHook is a hooks/<name>.yaml: when it runs, for which tools, what
// it runs and what its failure means.
type infoHook struct {
	Name    string   `json:"name"`
	File    string   `json:"file"`
	Event   string   `json:"event"`
	Match   []string `json:"match,omitempty"`
	Command []string `json:"command"`
	Timeout string   `json:"timeout"`
	OnError string   `json:"onError"`
	Network bool     `json:"network,omitempty"`
}

// hookLines are the hooks as `info` prints them.
func hookLines(hooks []infoHook) []string {
	var lines []string
	for _, h := range hooks {
		l := h.Name + "\t" + h.Event
		if len(h.Match) > 0 {
			l += " " + strings.Join(h.Match, "|")
		}
		l += " → " + strings.Join(h.Command, " ") + " (timeout " + h.Timeout + ", onError " + h.OnError
		if h.Network {
			l += ", network"
		}
		lines = append(lines, l+")")
	}
	return lines
}

// infoMCPServer is an mcpServers entry: how it is reached and, for a
// remote one, which headers it sends (names only) and its OAuth login.
type infoMCPServer struct {
	Name      string   `json:"name"`
	Transport string   `json:"transport"`
	Command   []string `json:"command,omitempty"`
	URL       string   `json:"url,omitempty"`
	Headers   []string `json:"headers,omitempty"`
	// OAuth is "logged in" or "not logged in" for a server with oauth: true.
	OAuth        string `json:"oauth,omitempty"`
	AllowPrivate bool   `json:"allowPrivate,omitempty"`
	Tools        int    `json:"tools"`
}

func mcpInfo(def *workspace.Definition) []infoMCPServer {
	out := []infoMCPServer{}
	for _, name := range slices.Sorted(maps.Keys(def.Config.MCPServers)) {
		s := def.Config.MCPServers[name]
		m := infoMCPServer{Name: name, URL: s.URL, AllowPrivate: s.AllowPrivate, Transport: s.MCPTransport()}
		if s.Command != "" {
			m.Transport, m.Command = "stdio", append([]string{s.Command}, s.Args...)
		}
		m.Headers = slices.Sorted(maps.Keys(s.Headers))
		if s.OAuth {
			m.OAuth = "not logged in (fastagent mcp login " + name + ")"
			if tf, err := mcp.ReadTokenFile(workspace.MCPTokenFile(def.Workspace, name)); err == nil {
				m.OAuth = "logged in"
				if tf.URL != s.URL {
					m.OAuth = "logged in to another URL (fastagent mcp login " + name + ")"
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				m.OAuth = "stored login unreadable (fastagent mcp login " + name + ")"
			}
		}
		for _, e := range def.Tools {
			if e.Origin == workspace.OriginMCP+name {
				m.Tools++
			}
		}
		out = append(out, m)
	}
	return out
}

func mcpLines(ms []infoMCPServer) []string {
	var lines []string
	for _, m := range ms {
		l := m.Name + "\t" + m.Transport + " "
		if m.URL != "" {
			l += m.URL
		} else {
			l += strings.Join(m.Command, " ")
		}
		var notes []string
		notes = append(notes, fmt.Sprintf("%d tools", m.Tools))
		if len(m.Headers) > 0 {
			notes = append(notes, "headers: "+strings.Join(m.Headers, ", "))
		}
		if m.OAuth != "" {
			notes = append(notes, "oauth: "+m.OAuth)
		}
		if m.AllowPrivate {
			notes = append(notes, "allowPrivate")
		}
		lines = append(lines, l+" ("+strings.Join(notes, "; ")+")")
	}
	return lines
}

// infoChannel is a channel file and its real state: off (*.disabled),
// on (with its route, or "long connection" for one that needs no route),
// or broken (what would stop the server).
type infoChannel struct {
	workspace.FileEntry
	State   string `json:"state"`
	Route   string `json:"route,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// channelInfo checks each channel file as the server would at startup.
func channelInfo(files []workspace.FileEntry) []infoChannel {
	out := []infoChannel{}
	for _, f := range files {
		if st, err := os.Stat(f.Path); err == nil && st.IsDir() && f.Name == webhook.Dir && f.Enabled {
			// One webhook endpoint per file.
			hooks, err := webhook.Files(f.Path)
			if err != nil {
				out = append(out, infoChannel{FileEntry: f, State: "broken", Problem: err.Error()})
			}
			for _, h := range hooks {
				h.Name = webhook.Dir + "/" + h.Name
				c := infoChannel{FileEntry: h, State: "off"}
				if h.Enabled {
					if ch, err := webhook.LoadFile(h.Path, os.Getenv); err != nil {
						c.State, c.Problem = "broken", err.Error()
					} else {
						c.State, c.Route = "on", "POST "+ch.Door.Path()+" ("+ch.Door.(*webhook.Door).Summary()+")"
					}
				}
				out = append(out, c)
			}
			continue
		}
		c := infoChannel{FileEntry: f, State: "off"}
		if f.Enabled {
			chans, err := channels.Load([]workspace.FileEntry{f}, os.Getenv)
			switch {
			case err != nil:
				c.State, c.Problem = "broken", err.Error()
			case len(chans) == 1:
				c.State, c.Route = "on", "POST "+chans[0].Door.Path()
				if chans[0].Door.Path() == "" {
					c.Route = "long connection"
				}
			}
		}
		out = append(out, c)
	}
	return out
}

type infoModel struct {
	Name string `json:"name,omitempty"`
	// Source is env (FASTAGENT_MODEL), file (fastagent.yaml) or unset.
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
}

type infoSkill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Path        string `json:"path"`
	// Hidden skills (disable-model-invocation) are not listed in the prompt.
	Hidden bool `json:"hidden,omitempty"`
}

type infoTool struct {
	Name             string `json:"name"`
	Origin           string `json:"origin"`
	Description      string `json:"description"`
	Deferred         bool   `json:"deferred,omitempty"`
	Idempotent       bool   `json:"idempotent,omitempty"`
	Sequential       bool   `json:"sequential,omitempty"`
	RequiresApproval bool   `json:"requiresApproval,omitempty"`
	// Network: the tool's processes have egress through the proxy.
	Network bool   `json:"network,omitempty"`
	Timeout string `json:"timeout,omitempty"`
}

func newInfo(g *globals) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show what the agent is made of: model, folders, context files, skills, tools, hooks, channels, schedules, problems",
		Long:  "Loads the agent definition as the worker would. Exit 0 when it loads (diagnostics are listed), 1 when it does not.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("info takes no arguments (use --dir / --agent-dir to pick the workspace)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			def, err := loadDefinition(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer def.Close()
			r := buildInfo(def.Definition)
			st := def.sandbox.Status()
			r.Sandbox = &st
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return failure("%w", err)
				}
				return nil
			}
			printInfo(cmd.OutOrStdout(), r)
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	return cmd
}

// loaded is a definition loaded as a worker would, with its tool sandbox.
type loaded struct {
	*workspace.Definition
	loader  *workspace.Loader
	sandbox *sandbox.Sandbox
}

// Close stops the MCP servers and the sandbox.
func (l *loaded) Close() {
	l.loader.Close()
	if l.sandbox != nil {
		_ = l.sandbox.Close()
	}
}

// loadDefinition loads the workspace's definition as a worker would, with
// the tool sandbox a worker would get (so that MCP stdio servers start and
// tools run confined); a failure is a runtime failure (exit 1). Close the
// result when done.
func loadDefinition(ctx context.Context, g *globals) (*loaded, error) { //nolint:contextcheck // the loaded definition (its MCP servers) outlives this call; Close ends it
	l, err := workspace.NewLoader(g.dir, g.agentDir)
	if err != nil {
		return nil, failure("%w", err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// The config says which sandbox; MCP servers wait for it.
	mcp := l.MCP
	l.MCP = nil
	def, err := l.Load(ctx)
	if err != nil {
		l.Close()
		return nil, failure("the agent definition does not load:\n%w", err)
	}
	stateDir := g.stateDir
	if stateDir == "" {
		stateDir = filepath.Join(def.Workspace.Dir, ".fastagent")
	}
	sb, err := serve.OpenSandbox(def, serve.SandboxSpec{StateDir: stateDir, TokensFile: os.Getenv("FASTAGENT_TOKENS_FILE")})
	if sb == nil {
		l.Close()
		return nil, failure("%w", err)
	}
	l.Sandbox, l.MCP = sb, mcp
	if def, err = l.Load(ctx); err != nil {
		l.Close()
		_ = sb.Close()
		return nil, failure("the agent definition does not load:\n%w", err)
	}
	return &loaded{Definition: def, loader: l, sandbox: sb}, nil
}

func buildInfo(def *workspace.Definition) infoReport {
	r := infoReport{
		Dir:          def.Workspace.Dir,
		AgentDir:     def.Workspace.AgentDir,
		ConfigFile:   def.ConfigPath,
		ContextFiles: []string{},
		Skills:       []infoSkill{},
		Tools:        []infoTool{},
		Hooks:        []infoHook{},
		MCPServers:   mcpInfo(def),
		Collisions:   append([]workspace.Collision{}, def.Collisions...),
		Channels:     channelInfo(def.Workspace.Channels()),
		Schedules:    append([]workspace.FileEntry{}, def.Workspace.Schedules()...),
		Diagnostics:  append([]workspace.Diagnostic{}, def.Diagnostics...),
	}
	r.Model = infoModel{Name: def.Config.Model, Source: "unset"}
	switch {
	case def.ModelSource == "FASTAGENT_MODEL":
		r.Model.Source = "env"
	case def.ModelSource != "":
		r.Model.Source, r.Model.File = "file", def.ModelSource
	}
	for _, f := range def.ContextFiles {
		r.ContextFiles = append(r.ContextFiles, f.Path)
	}
	for _, s := range def.Skills {
		r.Skills = append(r.Skills, infoSkill{Name: s.Name, Description: s.Description, Path: s.Path, Hidden: s.DisableModelInvocation})
	}
	for _, h := range def.Hooks {
		cmd := h.Command
		if rel, err := filepath.Rel(def.Workspace.AgentDir, cmd); err == nil && !strings.HasPrefix(rel, "..") {
			cmd = "./" + filepath.ToSlash(rel)
		}
		r.Hooks = append(r.Hooks, infoHook{Name: h.Name, File: h.File, Event: h.Event, Match: h.Match,
			Command: append([]string{cmd}, h.Args...), Timeout: h.Timeout.String(), OnError: h.OnError, Network: h.Network})
	}
	for _, e := range def.Tools {
		s := e.Tool.Spec()
		t := infoTool{
			Name: s.Name, Origin: e.Origin, Description: firstLine(s.Description, 100),
			Deferred: s.Deferred, Idempotent: s.Idempotent, Sequential: s.Sequential, RequiresApproval: s.RequiresApproval,
			Network: def.Network(s.Name),
		}
		if s.Timeout > 0 {
			t.Timeout = s.Timeout.String()
		}
		r.Tools = append(r.Tools, t)
	}
	return r
}

// sandboxLines says how tools are confined: the mechanism and what it
// enforces, that they run unconfined, or why none runs.
func sandboxLines(st sandbox.Status) []string {
	switch st.Mode {
	case "":
		return []string{"UNAVAILABLE: no tool runs", st.Error}
	case sandbox.Off:
		return []string{"OFF: " + st.Warning}
	}
	return append([]string{string(st.Mode)}, st.Enforces...)
}

func printInfo(out io.Writer, r infoReport) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	model := r.Model.Name
	switch r.Model.Source {
	case "env":
		model += "\t(from FASTAGENT_MODEL)"
	case "file":
		model += "\t(from " + r.Model.File + ")"
	default:
		model = "not set\t(set model: in fastagent.yaml or FASTAGENT_MODEL)"
	}
	fmt.Fprintf(w, "model\t%s\n", model)
	fmt.Fprintf(w, "working dir\t%s\n", r.Dir)
	fmt.Fprintf(w, "agent dir\t%s\n", r.AgentDir)
	cfg := r.ConfigFile
	if cfg == "" {
		cfg = "(none: defaults)"
	}
	fmt.Fprintf(w, "config\t%s\n", cfg)
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			fmt.Fprintf(w, "%s\t(none)\n", title)
			return
		}
		for i, l := range lines {
			if i > 0 {
				title = ""
			}
			fmt.Fprintf(w, "%s\t%s\n", title, l)
		}
	}
	section("context", r.ContextFiles)
	section("skills", skillLines(r.Skills))
	section("tools", toolLines(r.Tools))
	section("hooks", hookLines(r.Hooks))
	if len(r.MCPServers) > 0 {
		section("mcp servers", mcpLines(r.MCPServers))
	}
	if r.Sandbox != nil {
		section("sandbox", sandboxLines(*r.Sandbox))
	}
	var lines []string
	for _, c := range r.Collisions {
		lines = append(lines, fmt.Sprintf("%s\t%s wins over %s", c.Name, c.Kept, c.Skipped))
	}
	if len(lines) > 0 {
		section("collisions", lines)
	}
	section("channels", channelLines(r.Channels))
	lines = nil
	for _, s := range r.Schedules {
		lines = append(lines, s.Name+"\t"+s.Path)
	}
	section("schedules", lines)
	lines = nil
	for _, d := range r.Diagnostics {
		lines = append(lines, d.String())
	}
	section("problems", lines)
	_ = w.Flush()
}

// skillLines are the skills as `info` prints them.
func skillLines(skills []infoSkill) []string {
	var lines []string
	for _, s := range skills {
		l := s.Name + "\t" + firstLine(s.Description, 80)
		if s.Hidden {
			l += " (hidden from the model)"
		}
		lines = append(lines, l)
	}
	return lines
}

// toolLines are the tools as `info` prints them: name, origin and flags.
func toolLines(tools []infoTool) []string {
	var lines []string
	for _, t := range tools {
		var flags []string
		for _, f := range []struct {
			on   bool
			name string
		}{{t.Deferred, "deferred"}, {t.Idempotent, "idempotent"}, {t.Sequential, "sequential"}, {t.RequiresApproval, "approval"}, {t.Network, "network"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		l := t.Name + "\t" + t.Origin
		if len(flags) > 0 {
			l += " (" + strings.Join(flags, ", ") + ")"
		}
		lines = append(lines, l)
	}
	return lines
}

// channelLines are the channel files with their state: on with its route,
// broken with its problem, or off.
func channelLines(chans []infoChannel) []string {
	var lines []string
	for _, c := range chans {
		line := c.Name + "\t" + c.State
		switch c.State {
		case "on":
			line += "  " + c.Route
		case "broken":
			line += "  " + c.Problem
		}
		lines = append(lines, line+"  "+c.Path)
	}
	return lines
}
