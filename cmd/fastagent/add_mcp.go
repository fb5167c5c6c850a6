package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/internal/mcp"
	"github.com/fastagent/fastagent/internal/workspace"
)

// addMCPOptions are the flags of `add mcp`.
type addMCPOptions struct {
	url, transport      string
	headers, env        []string
	allowPrivate, oauth bool
	deferred, force     bool
	network             string
}

func newAddMCP(g *globals) *cobra.Command {
	o := &addMCPOptions{}
	cmd := &cobra.Command{
		Use:   "mcp <name> (--url <url> | -- <command> [args…])",
		Short: "Add an MCP server to fastagent.yaml (mcpServers.<name>): a command (stdio) or a URL",
		Long: "Writes mcpServers.<name> in fastagent.yaml: a stdio server started in the tool sandbox (the command after --),\n" +
			"or a remote server the worker reaches over streamable HTTP (or --transport sse). A header's value may name a\n" +
			"variable of the worker's environment as ${NAME}: the worker expands it when it connects, so the secret is never\n" +
			"written to the folder. An existing entry is never replaced without --force. fastagent info shows the result.",
		Example: "  fastagent add mcp files -- npx -y @modelcontextprotocol/server-filesystem .\n" +
			"  fastagent add mcp github --url https://api.githubcopilot.com/mcp/ --header 'Authorization=Bearer ${GITHUB_MCP_TOKEN}'\n" +
			"  fastagent add mcp linear --url https://mcp.linear.app/mcp --oauth   # then: fastagent mcp login linear",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var command []string
			if at := cmd.ArgsLenAtDash(); at >= 0 {
				command = args[at:]
				args = args[:at]
			}
			if len(args) != 1 {
				return usageError("add mcp takes one name, then -- and the server's command (or --url)")
			}
			return runAddMCP(g, o, args[0], command, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "", "the remote server's endpoint (https://…)")
	f.StringVar(&o.transport, "transport", "", "streamable-http (default) or sse (the legacy HTTP+SSE transport)")
	f.StringArrayVar(&o.headers, "header", nil, "K=V header sent to a remote server (repeatable); V may reference ${NAME}")
	f.BoolVar(&o.allowPrivate, "allow-private", false, "let a remote server be on loopback or a private network")
	f.BoolVar(&o.oauth, "oauth", false, "the remote server uses the MCP authorization flow (then run fastagent mcp login <name>)")
	f.StringArrayVar(&o.env, "env", nil, "K=V environment variable of a stdio server (repeatable); V may reference ${NAME}")
	f.StringVar(&o.network, "network", "", "on or off: give a stdio server network egress (default tools.network)")
	f.BoolVar(&o.deferred, "deferred", false, "keep the server's tools out of requests until the model activates them")
	f.BoolVar(&o.force, "force", false, "replace an existing mcpServers entry of that name")
	return cmd
}

// pairs parses K=V flags.
func pairs(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("--%s %q: want K=V", flag, kv)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

func runAddMCP(g *globals, o *addMCPOptions, name string, command []string, out io.Writer) error {
	if (len(command) == 0) == (o.url == "") {
		return usageError("give either --url <url> or -- <command> [args…]")
	}
	s := workspace.MCPServer{URL: o.url, Transport: o.transport, AllowPrivate: o.allowPrivate, OAuth: o.oauth, Deferred: o.deferred}
	var err error
	if s.Headers, err = pairs("header", o.headers); err != nil {
		return usageError("%w", err)
	}
	if s.Env, err = pairs("env", o.env); err != nil {
		return usageError("%w", err)
	}
	if len(command) > 0 {
		s.Command, s.Args = command[0], command[1:]
	}
	switch o.network {
	case "":
	case "on", "off":
		on := workspace.OnOff(o.network == "on")
		s.Network = &on
	default:
		return usageError("--network %q: want on or off", o.network)
	}
	node, err := mcpEntryNode(s)
	if err != nil {
		return failure("%w", err)
	}
	// The entry alone is checked as the loader would check it.
	if err := checkMCPEntry(name, node); err != nil {
		return usageError("%w; nothing was written", err)
	}
	dir, err := filepath.Abs(g.dir)
	if err != nil {
		return failure("%w", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageError("%s is not a folder (create the workspace first, e.g. fastagent init)", dir)
	}
	path := filepath.Join(dir, workspace.ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return failure("%w", err)
	}
	updated, err := setMCPEntry(b, name, node, o.force)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, updated, 0o644); err != nil { //nolint:gosec // G306: the config holds variable names, never secrets
		return failure("write %s: %w", path, err)
	}
	kind := "stdio: " + strings.Join(command, " ")
	if o.url != "" {
		kind = s.MCPTransport() + " " + o.url
	}
	fmt.Fprintf(out, "Added mcpServers.%s to %s (%s).\n", name, path, kind)
	for _, k := range sortedMapKeys(s.Headers) {
		for _, ref := range mcp.EnvRefs(s.Headers[k]) {
			fmt.Fprintf(out, "Set %s in the worker's environment (or .env): the worker expands ${%s} in the %s header when it connects.\n", ref, ref, k)
		}
	}
	if o.oauth {
		fmt.Fprintf(out, "Next: fastagent mcp login %s (opens the server's sign-in page; the token is kept in .fastagent/).\n", name)
	}
	fmt.Fprintln(out, "fastagent info lists the server and its tools.")
	return nil
}

func sortedMapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// mcpEntryNode is s as a YAML mapping, without its unset fields.
func mcpEntryNode(s workspace.MCPServer) (*yaml.Node, error) {
	type entry struct {
		Command      string            `yaml:"command,omitempty"`
		Args         []string          `yaml:"args,omitempty"`
		Env          map[string]string `yaml:"env,omitempty"`
		URL          string            `yaml:"url,omitempty"`
		Transport    string            `yaml:"transport,omitempty"`
		Headers      map[string]string `yaml:"headers,omitempty"`
		AllowPrivate bool              `yaml:"allowPrivate,omitempty"`
		OAuth        bool              `yaml:"oauth,omitempty"`
		Network      *workspace.OnOff  `yaml:"network,omitempty"`
		Deferred     bool              `yaml:"deferred,omitempty"`
	}
	var n yaml.Node
	err := n.Encode(entry{s.Command, s.Args, s.Env, s.URL, s.Transport, s.Headers, s.AllowPrivate, s.OAuth, s.Network, s.Deferred})
	return &n, err
}

// checkMCPEntry loads a config holding only the entry.
func checkMCPEntry(name string, entry *yaml.Node) error {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	servers := &yaml.Node{Kind: yaml.MappingNode}
	servers.Content = append(servers.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, entry)
	doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "mcpServers"}, servers)
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "fastagent-mcp-check-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := os.WriteFile(filepath.Join(tmp, workspace.ConfigFile), b, 0o600); err != nil {
		return err
	}
	_, err = workspace.LoadConfig(tmp)
	if err != nil {
		// The temporary path means nothing to the user.
		msg := err.Error()
		if i := strings.Index(msg, workspace.ConfigFile+":"); i >= 0 {
			msg = msg[i+len(workspace.ConfigFile)+1:]
			if j := strings.Index(msg, ": "); j >= 0 {
				msg = msg[j+2:]
			}
		}
		return errors.New(msg)
	}
	return nil
}

// setMCPEntry puts mcpServers.<name> into the config b (comments and the
// other keys kept), refusing to replace an entry without force.
func setMCPEntry(b []byte, name string, entry *yaml.Node, force bool) ([]byte, error) {
	var doc yaml.Node
	if len(bytes.TrimSpace(b)) > 0 {
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, failure("%s does not parse: %w", workspace.ConfigFile, err)
		}
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, failure("%s is not a mapping of keys", workspace.ConfigFile)
	}
	var servers *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "mcpServers" {
			servers = root.Content[i+1]
		}
	}
	if servers == nil || servers.Kind != yaml.MappingNode || servers.Tag == "!!null" {
		if servers == nil {
			servers = &yaml.Node{Kind: yaml.MappingNode}
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "mcpServers"}, servers)
		} else {
			*servers = yaml.Node{Kind: yaml.MappingNode}
		}
	}
	for i := 0; i+1 < len(servers.Content); i += 2 {
		if servers.Content[i].Value == name {
			if !force {
				return nil, usageError("mcpServers.%s already exists in %s; nothing was written (pass --force to replace it)", name, workspace.ConfigFile)
			}
			servers.Content[i+1] = entry
			return encodeYAML(&doc)
		}
	}
	servers.Content = append(servers.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, entry)
	return encodeYAML(&doc)
}

func encodeYAML(doc *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, failure("%w", err)
	}
	_ = enc.Close()
	return buf.Bytes(), nil
}

// newMCP is `fastagent mcp`: what concerns the agent's MCP servers.
func newMCP(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "MCP servers of the agent: log in to a remote server (OAuth)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newMCPLogin(g))
	return cmd
}

func newMCPLogin(g *globals) *cobra.Command {
	var noBrowser bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "login <server>",
		Short: "Log in to a remote MCP server with OAuth (authorization code + PKCE, dynamic client registration)",
		Long: "Runs the MCP authorization flow for mcpServers.<server> (which needs url: and oauth: true): registers a client\n" +
			"with the server's authorization server, opens its sign-in page in a browser, receives the answer on a loopback\n" +
			"address (127.0.0.1) and stores the tokens owner-only in .fastagent/mcp-oauth/<server>.json, where no tool can\n" +
			"read them. The worker sends the access token and refreshes it; run login again when it says so.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return runMCPLogin(ctx, g, args[0], noBrowser, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the sign-in URL without opening a browser")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the sign-in")
	return cmd
}

func runMCPLogin(ctx context.Context, g *globals, name string, noBrowser bool, out io.Writer) error {
	dir, err := filepath.Abs(g.dir)
	if err != nil {
		return failure("%w", err)
	}
	ws := workspace.Resolve(workspace.Workspace{Dir: dir, AgentDir: g.agentDir})
	cfg, err := workspace.LoadConfig(dir)
	if err != nil {
		return failure("%w", err)
	}
	s, ok := cfg.MCPServers[name]
	switch {
	case !ok:
		return usageError("fastagent.yaml has no mcpServers.%s (add one with fastagent add mcp %s --url <url> --oauth)", name, name)
	case s.URL == "" || !s.OAuth:
		return usageError("mcpServers.%s is not a url: server with oauth: true; nothing to log in to", name)
	}
	if err := workspace.EnsureSecrets(ws); err != nil {
		return failure("%w", err)
	}
	srv := workspace.MCPServerConfig(workspace.MCPContext{Workspace: ws, Config: cfg}, name, s)
	n, err := mcp.Login(ctx, srv, mcp.LoginOptions{Open: func(u string) error {
		fmt.Fprintf(out, "Open this address to sign in to %s:\n\n  %s\n\n", name, u)
		if !noBrowser {
			openBrowser(u)
		}
		fmt.Fprintln(out, "Waiting for the sign-in…")
		return nil
	}})
	if err != nil {
		return failure("login to %s: %w", name, err)
	}
	fmt.Fprintf(out, "Logged in to %s: %d tools. The token is stored in %s (owner-only; the worker refreshes it).\n", name, n, srv.OAuthFile)
	return nil
}

// openBrowser tries to open u in the user's browser; the URL is printed
// anyway, so a failure is silent.
func openBrowser(u string) {
	var c *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		c = exec.Command("open", u)
	case "windows":
		c = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		c = exec.Command("xdg-open", u)
	}
	if c.Start() == nil {
		go func() { _ = c.Wait() }()
	}
}
