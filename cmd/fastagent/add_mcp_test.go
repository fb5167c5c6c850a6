package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/internal/testsupport/oauthserver"
	"github.com/fastagent/fastagent/internal/workspace"
)

// add mcp writes stdio and remote entries into fastagent.yaml, keeping what
// was there; refuses a bad entry or an existing name (without --force)
// writing nothing; info lists the servers.
func TestAddMCP(t *testing.T) {
	dir := initWorkspace(t)
	cfgPath := filepath.Join(dir, "fastagent.yaml")
	before, _ := os.ReadFile(cfgPath)

	out, errOut, code := execute(t, "", "-C", dir, "add", "mcp", "files", "--env", "ROOT=${HOME}", "--", "/nonexistent/files-mcp", "--root", ".")
	if code != 0 {
		t.Fatalf("add mcp files: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "stdio: /nonexistent/files-mcp --root .") {
		t.Errorf("output: %s", out)
	}
	out, errOut, code = execute(t, "", "-C", dir, "add", "mcp", "gh", "--url", "https://mcp.example.invalid/mcp",
		"--header", "Authorization=Bearer ${GITHUB_MCP_TOKEN}", "--header", "X-Toolsets=repos")
	if code != 0 {
		t.Fatalf("add mcp gh: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Set GITHUB_MCP_TOKEN in the worker's environment") {
		t.Errorf("output does not name the variable: %s", out)
	}
	if _, errOut, code = execute(t, "", "-C", dir, "add", "mcp", "linear", "--url", "https://mcp.example.invalid/linear", "--oauth", "--transport", "sse"); code != 0 {
		t.Fatalf("add mcp linear: exit %d: %s", code, errOut)
	}

	cfg, err := workspace.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, gh, linear := cfg.MCPServers["files"], cfg.MCPServers["gh"], cfg.MCPServers["linear"]
	if files.Command != "/nonexistent/files-mcp" || strings.Join(files.Args, " ") != "--root ." || files.Env["ROOT"] != "${HOME}" {
		t.Errorf("files = %+v", files)
	}
	if gh.URL != "https://mcp.example.invalid/mcp" || gh.Headers["Authorization"] != "Bearer ${GITHUB_MCP_TOKEN}" || gh.Headers["X-Toolsets"] != "repos" {
		t.Errorf("gh = %+v", gh)
	}
	if !linear.OAuth || linear.Transport != "sse" {
		t.Errorf("linear = %+v", linear)
	}
	after, _ := os.ReadFile(cfgPath)
	if !strings.HasPrefix(strings.TrimSpace(string(after)), strings.TrimSpace(strings.SplitN(string(before), "\n", 2)[0])) {
		t.Errorf("the config's first line changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Refusals change nothing.
	for _, bad := range [][]string{
		{"gh", "--url", "https://other.example.invalid/"},                                          // exists
		{"plain", "--url", "http://mcp.example.invalid/", "--header", "Authorization=Bearer ${T}"}, // secret over http
		{"local", "--url", "http://127.0.0.1:9/mcp"},                                               // loopback without --allow-private
		{"both", "--url", "https://mcp.example.invalid/", "--", "cmd"},                             // both
		{"neither"}, // neither
		{"oauthhdr", "--url", "https://x.example.invalid/", "--oauth", "--header", "Authorization=Bearer x"}, // both kinds of auth
	} {
		_, errOut, code := execute(t, "", append([]string{"-C", dir, "add", "mcp"}, bad...)...)
		if code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", bad, code, errOut)
		}
		if now, _ := os.ReadFile(cfgPath); string(now) != string(after) {
			t.Errorf("%v changed the config:\n%s", bad, now)
		}
	}
	if _, errOut, code := execute(t, "", "-C", dir, "add", "mcp", "gh", "--force", "--url", "https://other.example.invalid/"); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, errOut)
	}
	if cfg, _ := workspace.LoadConfig(dir); cfg.MCPServers["gh"].URL != "https://other.example.invalid/" || len(cfg.MCPServers["gh"].Headers) != 0 {
		t.Errorf("after --force gh = %+v", cfg.MCPServers["gh"])
	}

	// info shows them (the servers cannot be reached here: diagnostics).
	out, errOut, code = execute(t, "", "-C", dir, "info", "--json")
	if code != 0 {
		t.Fatalf("info: exit %d: %s", code, errOut)
	}
	var r infoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]infoMCPServer{}
	for _, m := range r.MCPServers {
		got[m.Name] = m
	}
	if got["files"].Transport != "stdio" || got["gh"].Transport != "streamable-http" || got["linear"].Transport != "sse" ||
		!strings.HasPrefix(got["linear"].OAuth, "not logged in") {
		t.Errorf("info mcpServers = %+v", r.MCPServers)
	}
	out, _, _ = execute(t, "", "-C", dir, "info")
	if !strings.Contains(out, "mcp servers") || !strings.Contains(out, "sse https://mcp.example.invalid/linear") || !strings.Contains(out, "fastagent mcp login linear") {
		t.Errorf("info:\n%s", out)
	}
}

func writeSkill(t *testing.T, dir, frontMatter string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(frontMatter+"\nUse scripts/run.sh.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// add skill copies a folder or a git repository's skill into skills/,
// checks SKILL.md, refuses to overwrite without --force; info lists it.
func TestAddSkill(t *testing.T) {
	dir := initWorkspace(t)
	src := filepath.Join(t.TempDir(), "pdf-tools")
	writeSkill(t, src, "---\nname: pdf\ndescription: Fill and read PDF forms\n---")

	out, errOut, code := execute(t, "", "-C", dir, "add", "skill", src)
	if code != 0 {
		t.Fatalf("add skill: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Added skill pdf") {
		t.Errorf("output: %s", out)
	}
	if st, err := os.Stat(filepath.Join(dir, "skills", "pdf", "scripts", "run.sh")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("scripts/run.sh not copied executable: %v %v", st, err)
	}
	if _, errOut, code := execute(t, "", "-C", dir, "add", "skill", src); code != 2 || !strings.Contains(errOut, "--force") {
		t.Errorf("second add: exit %d %q, want a refusal naming --force", code, errOut)
	}
	writeSkill(t, src, "---\nname: pdf\ndescription: Fill, read and sign PDF forms\n---")
	if _, errOut, code := execute(t, "", "-C", dir, "add", "skill", "--force", src); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "skills", "pdf", "SKILL.md")); !strings.Contains(string(b), "sign PDF") {
		t.Errorf("--force did not replace the skill: %s", b)
	}

	// Bad front matter, a symlink, not a skill: refused, nothing written.
	bad := filepath.Join(t.TempDir(), "nodesc")
	writeSkill(t, bad, "---\nname: nodesc\n---")
	if _, errOut, code := execute(t, "", "-C", dir, "add", "skill", bad); code != 2 || !strings.Contains(errOut, "description") {
		t.Errorf("no description: exit %d %q", code, errOut)
	}
	link := filepath.Join(t.TempDir(), "linky")
	writeSkill(t, link, "---\nname: linky\ndescription: has a link\n---")
	if err := os.Symlink("/etc/passwd", filepath.Join(link, "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := execute(t, "", "-C", dir, "add", "skill", link); code != 2 || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("symlink: exit %d %q", code, errOut)
	}
	for _, n := range []string{"nodesc", "linky"} {
		if _, err := os.Stat(filepath.Join(dir, "skills", n)); err == nil {
			t.Errorf("skills/%s written", n)
		}
	}

	// From a git repository (a local bare one, by file:// URL), a skill in
	// a subfolder.
	work := filepath.Join(t.TempDir(), "work")
	writeSkill(t, filepath.Join(work, "skills", "review"), "---\ndescription: Review a pull request\n---")
	bare := filepath.Join(t.TempDir(), "skills.git")
	for _, args := range [][]string{
		{"-C", work, "init", "-q", "-b", "main"},
		{"-C", work, "add", "."},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "skills"},
		{"clone", "-q", "--bare", work, bare},
	} {
		if b, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	if _, errOut, code := execute(t, "", "-C", dir, "add", "skill", "file://"+bare, "--path", "skills/review"); code != 0 {
		t.Fatalf("add skill from git: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "skills", "review", "SKILL.md")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "skills", "review", ".git")); err == nil {
		t.Error(".git copied")
	}

	out, errOut, code = execute(t, "", "-C", dir, "info", "--json")
	if code != 0 {
		t.Fatalf("info: exit %d: %s", code, errOut)
	}
	var r infoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, s := range r.Skills {
		names[s.Name] = s.Description
	}
	if names["pdf"] != "Fill, read and sign PDF forms" || names["review"] != "Review a pull request" {
		t.Errorf("info skills = %+v", r.Skills)
	}
}

// mcp login refuses servers it cannot log in to, saying what to do; info
// reports a stored login.
func TestMCPLoginRefusesAndInfoShowsLogin(t *testing.T) {
	dir := initWorkspace(t)
	for _, args := range [][]string{
		{"-C", dir, "add", "mcp", "files", "--", "/nonexistent/files-mcp"},
		{"-C", dir, "add", "mcp", "gh", "--url", "https://mcp.example.invalid/"},
		{"-C", dir, "add", "mcp", "linear", "--url", "https://mcp.example.invalid/linear", "--oauth"},
	} {
		if _, errOut, code := execute(t, "", args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	for name, want := range map[string]string{"missing": "no mcpServers.missing", "files": "not a url: server with oauth: true", "gh": "not a url: server with oauth: true"} {
		if _, errOut, code := execute(t, "", "-C", dir, "mcp", "login", name, "--no-browser"); code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("login %s: exit %d %q, want 2 and %q", name, code, errOut, want)
		}
	}
	tokenFile := workspace.MCPTokenFile(workspace.Workspace{Dir: dir}, "linear")
	if err := os.MkdirAll(filepath.Dir(tokenFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := execute(t, "", "-C", dir, "info")
	if code != 0 || !strings.Contains(out, "oauth: stored login unreadable") {
		t.Errorf("info with a broken token file: exit %d %s\n%s", code, errOut, out)
	}
	tf := `{"url":"https://mcp.example.invalid/linear","clientId":"c","tokenUrl":"https://as.example.invalid/token","token":{"access_token":"a"}}`
	if err := os.WriteFile(tokenFile, []byte(tf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = execute(t, "", "-C", dir, "info")
	if code != 0 || !strings.Contains(out, "oauth: logged in)") {
		t.Errorf("info: exit %d %s\n%s", code, errOut, out)
	}
	if strings.Contains(out, `"a"`) {
		t.Error("info shows the token")
	}
}

// mcp login, end to end against a local authorization server: the command
// prints the sign-in address, the "browser" follows it, the token lands
// owner-only in .fastagent/mcp-oauth/, and info reports the login and the
// server's tools.
func TestMCPLoginEndToEnd(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "tickets", Version: "1.0.0"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "open_tickets", Description: "List open tickets"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "none"}}}, nil, nil
		})
	as := oauthserver.New(t, sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	dir := initWorkspace(t)
	if _, errOut, code := execute(t, "", "-C", dir, "add", "mcp", "tickets", "--url", as.URL+"/mcp", "--oauth", "--allow-private"); code != 0 {
		t.Fatalf("add mcp: exit %d: %s", code, errOut)
	}

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runMCPLogin(t.Context(), &globals{dir: dir}, "tickets", true, pw)
		_ = pw.Close()
	}()
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if u := strings.TrimSpace(line); strings.HasPrefix(u, as.URL+"/authorize?") {
			go func() { _ = oauthserver.Browser(u) }()
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("login: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Logged in to tickets: 1 tools") {
		t.Errorf("output:\n%s", out.String())
	}
	st, err := os.Stat(workspace.MCPTokenFile(workspace.Workspace{Dir: dir}, "tickets"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	info, errOut, code := execute(t, "", "-C", dir, "info")
	if code != 0 || !strings.Contains(info, "1 tools; oauth: logged in; allowPrivate") || !strings.Contains(info, "open_tickets") {
		t.Errorf("info: exit %d %s\n%s", code, errOut, info)
	}
}
