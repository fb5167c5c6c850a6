package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// landlockABI is the kernel's Landlock ABI version, 0 when there is none.
func landlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// minLandlockABI is what Landlock mode needs: ABI 3 (Linux 6.2) controls
// truncate, so a read-only file cannot be emptied; TCP rules need ABI 4.
const (
	minLandlockABI    = 3
	landlockNetworkAB = 4
	landlockScopedABI = 6
)

// fsRights returns every file-system right the kernel's ABI handles.
func fsRights(abi int) uint64 {
	switch {
	case abi >= 5:
		return 1<<16 - 1
	case abi >= 3:
		return 1<<15 - 1
	case abi == 2:
		return 1<<14 - 1
	case abi == 1:
		return 1<<13 - 1
	}
	return 0
}

const (
	readRights  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	fileRights  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	deviceRight = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSIoctlDev
)

// devices are written by ordinary programs (>/dev/null) and hold nothing.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// privateDirs are replaced by the call's own temporary directory: nothing
// another call or user left there is readable.
var privateDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// hostTerminals hold the pseudo-terminals of the machine, those of the
// worker's user among them (/dev/pts/N: the terminal fastagent dev or chat
// runs in, any other the operator has open), which that user may open by
// name: a tool could read what the operator types and write to the
// operator's screen. Namespaces mode gives each call its own instead;
// Landlock mode none (the tool cannot write /dev/ptmx anyway).
var hostTerminals = []string{"/dev/pts"}

// rule is one path_beneath rule.
type rule struct {
	path   string
	rights uint64
}

// fsPolicy is a call's file-system policy in absolute, resolved paths.
type fsPolicy struct {
	writable, protected, hidden, visible []string
	tmp                                  string // the call's private temporary directory
}

// landlockRules turns the policy into path_beneath rules: read access to
// everything but the hidden and private trees and the host's terminals, full access to the writable
// trees minus their protected and hidden parts, the call's temporary
// directory and the harmless devices.
//
// Landlock grants whole trees and cannot take part of one back, so a tree
// that contains an exception is split: it gets only the right to list it,
// and each of its entries gets a rule of its own (recursively, down to the
// exception). A consequence: no new entry can be created directly in a
// directory that is split for writing (the workspace root holds the rules),
// only inside its existing subdirectories.
func landlockRules(p fsPolicy) []rule {
	var rules []rule
	denyRead := append(append(append(append([]string{}, p.hidden...), privateDirs...), hostTerminals...), p.tmp)
	rules = split("/", denyRead, readRights, rules)
	for _, v := range p.visible {
		rules = split(v, p.hidden, readRights, rules)
	}
	exceptions := append(append([]string{}, p.protected...), p.hidden...)
	for _, w := range p.writable {
		rules = split(w, exceptions, ^uint64(0), rules)
		// Protected entries stay readable even where the read pass did not
		// reach (a workspace under /tmp).
		for _, pr := range p.protected {
			if under(pr, w) && !coveredBy(pr, p.hidden) {
				rules = append(rules, rule{pr, readRights})
			}
		}
	}
	if p.tmp != "" {
		rules = append(rules, rule{p.tmp, ^uint64(0)})
	}
	for _, d := range devices {
		rules = append(rules, rule{d, deviceRight})
	}
	return rules
}

// split grants rights beneath root, except beneath the paths in except: a
// root with no exception inside gets one rule; an exception gets none; a
// root with exceptions inside gets ReadDir (and, for writing, nothing that
// creates or removes) and each entry is split in turn.
func split(root string, except []string, rights uint64, rules []rule) []rule {
	if coveredBy(root, except) {
		return rules
	}
	inside := false
	for _, e := range except {
		inside = inside || under(e, root)
	}
	if !inside {
		return append(rules, rule{root, rights})
	}
	rules = append(rules, rule{root, ll.AccessFSReadDir})
	entries, err := os.ReadDir(root)
	if err != nil {
		return rules
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		child := filepath.Join(root, n)
		fi, err := os.Lstat(child)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			// Reached through its target, which has rules of its own.
		case fi.IsDir():
			rules = split(child, except, rights, rules)
		case !coveredBy(child, except):
			rules = append(rules, rule{child, rights})
		}
	}
	return rules
}

// coveredBy reports whether p is one of roots or inside one.
func coveredBy(p string, roots []string) bool {
	for _, r := range roots {
		if under(p, r) {
			return true
		}
	}
	return false
}

// scopingRuleset is what a namespaces-mode call gets: a Landlock domain that
// restricts nothing on the file system but, like every domain, keeps the
// call from ptracing (or reading /proc/<pid>/environ and mem of) any process
// outside it, and from ABI 6 from signalling them or reaching their
// abstract unix sockets. It separates concurrent calls that share /proc.
func scopingRuleset(abi int) (int, error) {
	attr := ll.RulesetAttr{}
	if abi >= landlockScopedABI {
		attr.Scoped = ll.ScopeSignal | ll.ScopeAbstractUnixSocket
	} else {
		attr.HandledAccessFS = ll.AccessFSMakeBlock // needs CAP_MKNOD anyway
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("landlock: create ruleset: %w", err)
	}
	return fd, nil
}

// fullRuleset builds the Landlock-mode ruleset of one call. With proxyPort
// > 0 the call may connect over TCP to that port only; with 0, to none.
func fullRuleset(abi int, p fsPolicy, proxyPort int) (int, error) {
	handled := fsRights(abi)
	attr := ll.RulesetAttr{HandledAccessFS: handled}
	if abi >= landlockNetworkAB {
		attr.HandledAccessNet = ll.AccessNetBindTCP | ll.AccessNetConnectTCP
	}
	if abi >= landlockScopedABI {
		attr.Scoped = ll.ScopeSignal | ll.ScopeAbstractUnixSocket
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("landlock: create ruleset: %w", err)
	}
	for _, r := range landlockRules(p) {
		if err := addPathRule(fd, r, handled); err != nil {
			_ = unix.Close(fd)
			return -1, err
		}
	}
	if proxyPort > 0 {
		if abi < landlockNetworkAB {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("landlock: network access needs Landlock ABI %d (Linux 6.7); this kernel has %d", landlockNetworkAB, abi)
		}
		if err := ll.LandlockAddNetPortRule(fd, &ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(proxyPort)}, 0); err != nil { //nolint:gosec // G115: a port
			_ = unix.Close(fd)
			return -1, fmt.Errorf("landlock: allow the proxy port: %w", err)
		}
	}
	return fd, nil
}

// addPathRule adds r, limited to what the kernel handles and to what a
// non-directory can carry. A path that no longer exists is skipped; the
// rule's object is the path itself, not a symlink's target.
func addPathRule(fd int, r rule, handled uint64) error {
	pfd, err := unix.Open(r.path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES) {
			return nil
		}
		return fmt.Errorf("landlock: open %s: %w", r.path, err)
	}
	defer func() { _ = unix.Close(pfd) }()
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return fmt.Errorf("landlock: stat %s: %w", r.path, err)
	}
	rights := r.rights & handled
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return nil // reached through its target
	case unix.S_IFDIR:
	default:
		rights &= fileRights
	}
	if rights == 0 {
		return nil
	}
	if err := ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: pfd}, 0); err != nil {
		return fmt.Errorf("landlock: rule for %s: %w", r.path, err)
	}
	return nil
}
