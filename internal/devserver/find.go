package devserver

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Program is the dev server program's name.
const Program = "fastagent-devserver"

// EnvBinary names the dev server program to run, before any other place.
const EnvBinary = "FASTAGENT_DEVSERVER"

const (
	mainModule  = "github.com/fastagent/fastagent"
	childModule = mainModule + "/cmd/" + Program
	childDir    = "cmd/" + Program
)

// buildHint says how to get the program by hand.
const buildHint = "in a checkout of fastagent: `make bin/fastagent-devserver`; otherwise `go install " + childModule + "@<the version of fastagent>`, " +
	"then put it next to fastagent, on PATH, or name it in " + EnvBinary

// Find returns the dev server program to run, looking in order at:
//
//  1. $FASTAGENT_DEVSERVER;
//  2. fastagent-devserver next to this program's executable;
//  3. fastagent-devserver on PATH;
//  4. with the Go toolchain: a build in the user cache dir, made once —
//     from the source checkout this process runs in (found from the
//     working directory or the executable), keyed by the content of its
//     cmd/fastagent-devserver; else `go install` of the module at the
//     version of fastagent this program was built with.
//
// Otherwise it is an error saying what to run. log reports a build.
func Find(log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.Default()
	}
	if p := os.Getenv(EnvBinary); p != "" {
		if !executable(p) {
			return "", fmt.Errorf("%s=%s: no executable there (%s)", EnvBinary, p, buildHint)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if p := filepath.Join(filepath.Dir(exe), Program); executable(p) {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath(Program); err == nil {
		return p, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w, and there is no Go toolchain to build it: %s", errNotFound, buildHint)
	}
	if root := checkout(); root != "" {
		return buildFromCheckout(goBin, root, log)
	}
	if v := moduleVersion(); v != "" {
		return installVersion(goBin, v, log)
	}
	return "", fmt.Errorf("%w (this fastagent was built outside a checkout and without a module version): %s", errNotFound, buildHint)
}

func executable(p string) bool {
	fi, err := os.Stat(p) //nolint:gosec // G703: a program the user named or a fixed place to look

	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// checkout is the root of the fastagent source checkout holding the
// working directory or this executable ("" when neither is in one).
func checkout() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			if moduleOf(filepath.Join(dir, "go.mod")) == mainModule && moduleOf(filepath.Join(dir, childDir, "go.mod")) == childModule {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}

// moduleOf is the module path a go.mod declares ("" without one).
func moduleOf(gomod string) string {
	f, err := os.Open(gomod) //nolint:gosec // G304: a go.mod looked up on purpose
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// moduleVersion is the version of the fastagent module this program was
// built with ("" for a development build): the main module's for the CLI,
// a dependency's for a program importing fastagent.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	mods := append([]*debug.Module{&info.Main}, info.Deps...)
	for _, m := range mods {
		if m.Path != mainModule {
			continue
		}
		if m.Replace != nil || m.Version == "" || m.Version == "(devel)" {
			return ""
		}
		return m.Version
	}
	return ""
}

// cacheDir is where builds of the program are kept.
func cacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w, and no user cache dir to build it into (%w): %s", errNotFound, err, buildHint)
	}
	return filepath.Join(dir, "fastagent", Program), nil
}

// sourceKey is a digest of the program's sources in a checkout: its
// go.mod, go.sum and non-test Go files.
func sourceKey(root string) (string, error) {
	h := sha256.New()
	dir := filepath.Join(root, childDir)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		source := name == "go.mod" || name == "go.sum" || strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
		if d.IsDir() || !source {
			return nil
		}
		b, err := os.ReadFile(p) //nolint:gosec // G304: a source file of the checkout
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read %s: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// buildFromCheckout builds the checkout's cmd/fastagent-devserver into the
// cache, once per content of its sources.
func buildFromCheckout(goBin, root string, log *slog.Logger) (string, error) {
	key, err := sourceKey(root)
	if err != nil {
		return "", err
	}
	return buildOnce("src-"+key, log, fmt.Sprintf("from %s", filepath.Join(root, childDir)), func(out string) *exec.Cmd {
		cmd := exec.Command(goBin, "build", "-o", out, ".") //nolint:gosec // G204: the go toolchain building this checkout
		cmd.Dir = filepath.Join(root, childDir)
		return cmd
	})
}

// installVersion installs the program at the version of this fastagent
// (a pseudo-version by its commit, which names the same tree for the
// nested module) into the cache.
func installVersion(goBin, version string, log *slog.Logger) (string, error) {
	ref := versionRef(version)
	return buildOnce("v-"+strings.NewReplacer("/", "_", "+", "_").Replace(version), log, "of "+childModule+"@"+ref, func(out string) *exec.Cmd {
		cmd := exec.Command(goBin, "install", childModule+"@"+ref) //nolint:gosec // G204: the go toolchain installing the matching version
		cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(out))
		cmd.Dir = os.TempDir()
		return cmd
	})
}

// versionRef is what `go install <module>@` takes for the nested module at
// the fastagent version v: the commit of a pseudo-version (the nested
// module has its own pseudo-versions of the same commit), else v itself
// (a release tags both modules: v0.1.0 and cmd/fastagent-devserver/v0.1.0).
func versionRef(v string) string {
	base := strings.TrimSuffix(v, "+incompatible")
	if i := strings.LastIndexByte(base, '-'); i >= 0 && strings.Count(base, "-") >= 2 && len(base)-i-1 == 12 {
		return base[i+1:] // v0.0.0-20260101000000-abcdef123456: the commit
	}
	return v
}

// buildOnce returns the cached program named by key, building it with
// build (which writes it to its argument, or into that file's directory
// for go install) when it is missing. Concurrent callers — several test
// processes — wait for one build, under a lock file.
func buildOnce(key string, log *slog.Logger, what string, build func(out string) *exec.Cmd) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, key)
	bin := filepath.Join(dir, Program)
	if executable(bin) {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // used: pruneBuilds keeps it
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a cache of programs, like GOBIN
		return "", fmt.Errorf("%w: %w", errNotFound, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // G304: in the cache dir
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNotFound, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil { //nolint:gosec // G115: a file descriptor
		return "", fmt.Errorf("%w: lock %s: %w", errNotFound, lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }() //nolint:gosec // G115: a file descriptor
	// Another process may have built it while this one waited.
	if executable(bin) {
		return bin, nil
	}
	log.Warn("building the Temporal dev server once — " + what + ", into " + dir +
		": it is a program of its own so that fastagent does not link the Temporal server (a first build takes minutes; later runs start at once)")
	started := time.Now()
	tmp := filepath.Join(dir, "build-tmp")
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil { //nolint:gosec // G301: see above
		return "", fmt.Errorf("%w: %w", errNotFound, err)
	}
	defer os.RemoveAll(tmp)
	cmd := build(filepath.Join(tmp, Program))
	// Not the caller's GOFLAGS (a -race of the tests must not reach this
	// build), nor a go.work: the program is built as its module says.
	cmd.Env = append(slices.DeleteFunc(append([]string(nil), envOr(cmd.Env)...), func(kv string) bool {
		return strings.HasPrefix(kv, "GOWORK=") || strings.HasPrefix(kv, "GOFLAGS=")
	}), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w, and building it failed (%w): %s\n%s", errNotFound, err, buildHint, tail(out.String(), 2000))
	}
	if err := os.Rename(filepath.Join(tmp, Program), bin); err != nil {
		return "", fmt.Errorf("%w: %w", errNotFound, err)
	}
	log.Warn("built the Temporal dev server", "path", bin, "took", time.Since(started).Round(time.Second))
	pruneBuilds(cache, key)
	return bin, nil
}

// unusedFor is how long a cached build of the program stays unused before
// a new build removes it (each edit of a checkout's cmd/fastagent-devserver
// is a build of about 300 MB).
const unusedFor = 7 * 24 * time.Hour

// pruneBuilds removes the cached builds other than keep that nobody used
// for unusedFor (Find marks a build it returns as used).
func pruneBuilds(cache, keep string) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == keep {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > unusedFor {
			_ = os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
}

func envOr(env []string) []string {
	if env == nil {
		return os.Environ()
	}
	return env
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// IsNotFound reports whether err is Find's "no program" error.
func IsNotFound(err error) bool { return errors.Is(err, errNotFound) }
