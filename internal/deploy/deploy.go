// Package deploy renders what `fastagent deploy <target>` writes for an
// agent folder: a Dockerfile, the target's configuration (a compose file,
// Kubernetes manifests, a Helm chart, Fly or Railway configs) and a
// RUNBOOK.md, from templates embedded in the binary. Secrets appear by name
// only; worker and ingress are always separate services, so each scales and
// rolls out on its own.
package deploy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
)

//go:embed all:templates
var templates embed.FS

// Targets are the deployment targets, in the order help lists them.
var Targets = []string{"compose", "kubernetes", "helm", "fly", "railway"}

// Temporal modes: a Temporal server the deployment runs itself, or
// Temporal Cloud.
const (
	TemporalSelf  = "self"
	TemporalCloud = "cloud"
)

// Spec is what the rendered files are made of.
type Spec struct {
	// Name names the deployment's services, Kubernetes objects, Fly and
	// Railway apps: a DNS label (Name checks it).
	Name string
	// Image is the container image the cluster targets run (compose and
	// Fly build it themselves).
	Image string
	// Version is the fastagent release the Dockerfile installs ("latest"
	// for a development build).
	Version string
	// Temporal is TemporalSelf or TemporalCloud.
	Temporal string
	// Namespace is the Temporal namespace; Address its frontend (for
	// Cloud, the regional API-key endpoint).
	Namespace string
	Address   string
	// TaskQueue is the main agent's task queue.
	TaskQueue string
	// Model is FASTAGENT_MODEL when fastagent.yaml names no model ("" when
	// it does); ModelKeys are the variables the models' keys are read from.
	Model     string
	ModelKeys []string
	// Agents are the agents served beside the main one (--agent), their
	// folders relative to the workspace.
	Agents []Agent
	// Context is the build context (the workspace) relative to the output
	// folder, and Dockerfile the Dockerfile relative to the workspace,
	// both with forward slashes.
	Context    string
	Dockerfile string
}

// Agent is one agent served beside the main one.
type Agent struct {
	Name string
	// Dir is its folder relative to the workspace, with forward slashes.
	Dir string
}

var dnsLabel = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`)

// Name makes a deployment name of s (an agent folder's base name, say):
// lower case, other characters turned into '-', at most 40; "" when nothing
// usable is left.
func Name(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	n := strings.Trim(b.String(), "-0123456789")
	for strings.Contains(n, "--") {
		n = strings.ReplaceAll(n, "--", "-")
	}
	if len(n) > 40 {
		n = strings.TrimRight(n[:40], "-")
	}
	return n
}

// Check says what is wrong with s, if anything.
func (s Spec) Check() error {
	if !dnsLabel.MatchString(s.Name) {
		return fmt.Errorf("deployment name %q: want 1-40 lowercase letters, digits or '-', starting with a letter (--name)", s.Name)
	}
	if s.Temporal != TemporalSelf && s.Temporal != TemporalCloud {
		return fmt.Errorf("--temporal %q: want self (a Temporal server the deployment runs) or cloud (Temporal Cloud)", s.Temporal)
	}
	if s.Image == "" || s.Version == "" || s.Namespace == "" || s.TaskQueue == "" || s.Context == "" || s.Dockerfile == "" {
		return errors.New("deploy: image, version, namespace, task queue, context and Dockerfile must be set")
	}
	for _, a := range s.Agents {
		if a.Dir == "" || strings.HasPrefix(a.Dir, "../") || path.IsAbs(a.Dir) {
			return fmt.Errorf("--agent %s=%s: the folder must be inside the workspace, which is what the image holds", a.Name, a.Dir)
		}
	}
	return nil
}

// File is one rendered file, its path relative to the output folder.
type File struct {
	Path string
	Data []byte
}

// Render renders target's files for s.
func Render(target string, s Spec) ([]File, error) {
	if !slices.Contains(Targets, target) {
		return nil, fmt.Errorf("unknown deploy target %q: want one of %s", target, strings.Join(Targets, ", "))
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	sort.Strings(s.ModelKeys)
	v := view{Spec: s, Target: target, Cloud: s.Temporal == TemporalCloud}
	var files []File
	for _, root := range []string{"templates/common", "templates/" + target} {
		err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel := strings.TrimPrefix(p, root+"/")
			raw, err := templates.ReadFile(p)
			if err != nil {
				return err
			}
			out := raw
			if strings.HasSuffix(rel, ".tmpl") {
				rel = strings.TrimSuffix(rel, ".tmpl")
				if out, err = execute(p, string(raw), v); err != nil {
					return err
				}
			}
			rel = strings.ReplaceAll(rel, "_dot_", ".")
			if len(bytes.TrimSpace(out)) == 0 {
				return nil // a file this configuration does not need
			}
			files = append(files, File{Path: rel, Data: out})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("deploy: render %s: %w", target, err)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// view is what the templates see.
type view struct {
	Spec
	Target string
	Cloud  bool
}

// Secret is one secret the processes read from their environment.
type Secret struct {
	Name string
	// Worker and Ingress say which process needs it; Optional ones may be
	// left unset.
	Worker, Ingress, Optional bool
	Meaning                   string
}

// Secrets are the secrets of this deployment, by name.
func (v view) Secrets() []Secret {
	out := []Secret{
		{Name: "FASTAGENT_STORE", Worker: true, Ingress: true, Meaning: "the session store: postgres://fastagent:<password>@<host>:5432/fastagent?sslmode=require"},
		{Name: "FASTAGENT_FEED", Worker: true, Ingress: true, Meaning: "the live feed: nats://<token>@<host>:4222 (NATS with JetStream)"},
		{Name: "FASTAGENT_API_TOKENS", Ingress: true, Meaning: "the ingress's API tokens, lines principal:rights:sha256hex (`fastagent token add`)"},
		{Name: "FASTAGENT_CODEC_KEYS", Worker: true, Ingress: true, Optional: true, Meaning: "payload encryption keys id:base64 (`openssl rand -base64 32`); every process needs the same"},
	}
	if v.Cloud {
		out = append(out, Secret{Name: "TEMPORAL_API_KEY", Worker: true, Ingress: true, Meaning: "the Temporal Cloud API key of a service account with write access to the namespace"})
	}
	for _, k := range v.ModelKeys {
		out = append(out, Secret{Name: k, Worker: true, Meaning: "model provider key (only workers call models)"})
	}
	return out
}

// WorkerSecrets and IngressSecrets are the secrets each process reads.
func (v view) WorkerSecrets() []Secret {
	return filter(v.Secrets(), func(s Secret) bool { return s.Worker })
}
func (v view) IngressSecrets() []Secret {
	return filter(v.Secrets(), func(s Secret) bool { return s.Ingress })
}

func filter(in []Secret, keep func(Secret) bool) []Secret {
	var out []Secret
	for _, s := range in {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// WorkerArgs is the worker's command line (after the program name).
func (v view) WorkerArgs() []string {
	args := []string{"worker"}
	for _, a := range v.Agents {
		args = append(args, "--agent", a.Name+"=/workspace/"+a.Dir)
	}
	return args
}

// IngressArgs is the ingress's command line (after the program name).
func (v view) IngressArgs() []string {
	args := []string{"ingress"}
	for _, a := range v.Agents {
		args = append(args, "--agent", a.Name+"=/workspace/"+a.Dir)
	}
	return args
}

// ImageRepo and BuildID split Image at its tag: the tag is the worker's
// build ID (FASTAGENT_BUILD_ID), so every replica of an image is one
// Worker Deployment version ("v1" for an untagged image).
func (v view) ImageRepo() string {
	repo, _ := splitImage(v.Image)
	return repo
}

// BuildID is the tag of Image (see ImageRepo).
func (v view) BuildID() string {
	_, tag := splitImage(v.Image)
	return tag
}

func splitImage(image string) (repo, tag string) {
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[:i], image[i+1:]
	}
	return image, "v1"
}

// OutDir is the output folder relative to the workspace.
func (v view) OutDir() string { return path.Dir(v.Dockerfile) }

// TaskQueues are the task queues workers poll: the main agent's and each
// sibling's (named after it).
func (v view) TaskQueues() []string {
	q := []string{v.TaskQueue}
	for _, a := range v.Agents {
		q = append(q, a.Name)
	}
	return q
}

func execute(name, text string, v view) ([]byte, error) {
	t, err := template.New(path.Base(name)).Delims("[[", "]]").Option("missingkey=error").Funcs(template.FuncMap{
		"quote": func(s string) string { return fmt.Sprintf("%q", s) },
		"json": func(ss []string) string {
			q := make([]string, len(ss))
			for i, s := range ss {
				q[i] = fmt.Sprintf("%q", s)
			}
			return "[" + strings.Join(q, ", ") + "]"
		},
		"join":    strings.Join,
		"prepend": func(s string, ss []string) []string { return append([]string{s}, ss...) },
	}).Parse(text)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ErrExists is returned by Write for files that are there already.
var ErrExists = errors.New("already exists")

// Write writes files under dir. Unless force, it writes nothing when any
// of them exists, and says which: an operator's edits are never silently
// replaced.
func Write(dir string, files []File, force bool) error {
	if !force {
		var there []string
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f.Path))); err == nil {
				there = append(there, filepath.Join(dir, filepath.FromSlash(f.Path)))
			}
		}
		if len(there) > 0 {
			return fmt.Errorf("%w: %s; nothing was written (move them away, choose another --out, or pass --force to overwrite them)",
				ErrExists, strings.Join(there, ", "))
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
