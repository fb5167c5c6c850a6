package apicheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// builderCalls are the constructions only the runtime builder
// (serve.Assemble and its Parts) may write: a worker and an ingress.
var builderCalls = []string{"worker" + ".New(", "ingress" + ".Server{"} // split: this file is no construction

// builderOnly reports whether rel may construct a worker or an ingress by
// hand: the builder itself (internal/serve), the plugin's split workers
// (internal/plugin), the public worker and activities packages (the
// plugin's constructor, and users' own workers with the plugin or a group
// of the activity set, as their examples and tests show them), the other
// public packages' examples, and the ingress's own unit tests, which test
// the handler as a unit.
func builderOnly(rel string) bool {
	rel = filepath.ToSlash(rel)
	switch {
	case strings.HasPrefix(rel, "internal/serve/"), strings.HasPrefix(rel, "internal/plugin/"):
		return true
	case strings.HasPrefix(rel, "worker/"), strings.HasPrefix(rel, "activities/"):
		return true
	case !strings.HasPrefix(rel, "internal/") && strings.HasSuffix(rel, "example_test.go"):
		return true
	case strings.HasPrefix(rel, "internal/ingress/") && strings.HasSuffix(rel, "_test.go"):
		return true
	}
	return false
}

// Every worker and every ingress — the CLI's, fastagent.Start's, the
// lab's, the end-to-end tests' — is built by the one builder (serve.Parts:
// StartWorker, Worker, Plugin, IngressFor), so what a test or a benchmark
// runs is what the serving commands run, and a part the builder wires in
// (the session store of the durable agent, channel repliers, metrics) is
// never missing from a hand-built copy. A user's own worker gets the same
// parts through the fastagent plugin (the worker package), which the
// builder makes too.
func TestWorkerAndIngressOnlyFromTheBuilder(t *testing.T) {
	var stray []string
	allowed := map[string]int{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, call := range builderCalls {
				if !bytes.Contains(line, []byte(call)) {
					continue
				}
				if builderOnly(rel) {
					allowed[call]++
					continue
				}
				stray = append(stray, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(rel), i+1, strings.TrimSpace(string(line))))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range builderCalls {
		if allowed[call] == 0 {
			t.Fatalf("no %q found even in the builder: the walk is broken", call)
		}
	}
	if len(stray) > 0 {
		t.Errorf("%d worker or ingress constructions outside the builder; build them with serve.Assemble / Parts (StartWorker, Worker, IngressFor):\n%s",
			len(stray), strings.Join(stray, "\n"))
	}
}

// seamsAllowed reports whether rel may fill serve.Components, the test
// seams of the builder: the builder itself, the test kits, the lab (a
// bench and fault suite), and tests.
func seamsAllowed(rel string) bool {
	rel = filepath.ToSlash(rel)
	return strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "internal/serve/") ||
		strings.HasPrefix(rel, "internal/testsupport/") || strings.HasPrefix(rel, "cmd/fastagent-lab/")
}

// Production code — the CLI, fastagent.Start, the public worker, ingress
// and activities packages — builds its runtime from serve.Config alone:
// what tests inject (serve.Components: given stores and feeds, fake
// repliers, interceptors, worker tuning) it leaves empty, so a serving
// command and the library differ only in what users set.
func TestProductionSetsNoSeams(t *testing.T) {
	var stray []string
	empty := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if !strings.HasSuffix(p, ".go") || seamsAllowed(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			for rest := line; ; {
				j := bytes.Index(rest, []byte("serve.Components{"))
				if j < 0 {
					break
				}
				rest = rest[j+len("serve.Components{"):]
				if bytes.HasPrefix(rest, []byte("}")) {
					empty++
					continue
				}
				stray = append(stray, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(rel), i+1, strings.TrimSpace(string(line))))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if empty == 0 {
		t.Fatal("no serve.Components{} found in production code: the walk is broken")
	}
	if len(stray) > 0 {
		t.Errorf("production code fills the builder's test seams (serve.Components); set serve.Config instead:\n%s", strings.Join(stray, "\n"))
	}
}
