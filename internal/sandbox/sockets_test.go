package sandbox_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// socketProbe tries every way a process can open a connection or reach a
// local socket without connect(2) on a plain TCP socket — what Landlock's
// TCP rule checks — plus the kernel interfaces the filter refuses. It
// prints one line per attempt: "<name>: <verdict>", the verdict being
// "reached" (the loopback listener answered), "sent", "made", "listening",
// "ok" (the call succeeded), "refused" (EPERM: the seccomp filter) or
// "failed <ERRNO>".
//
// argv: host port unix-dgram-path unix-stream-path victim-pid
const socketProbe = `
import socket, errno, sys, ctypes, os, platform, struct
host, port, dgram, stream, victim = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
req = b"GET / HTTP/1.0\r\n\r\n"
libc = ctypes.CDLL(None, use_errno=True)
NR = {
  "x86_64": dict(io_uring_setup=425, bpf=321, userfaultfd=323, perf_event_open=298, keyctl=250, ptrace=101,
    process_vm_readv=310, unshare=272, mount=165, sendmmsg=307),
  "aarch64": dict(io_uring_setup=425, bpf=280, userfaultfd=282, perf_event_open=241, keyctl=219, ptrace=117,
    process_vm_readv=270, unshare=97, mount=40, sendmmsg=269),
}[platform.machine()]

def syscall(name, *args):
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r

def answer(s):
    s.settimeout(5)
    data = b""
    while True:
        try:
            c = s.recv(4096)
        except OSError as e:
            return "failed " + errno.errorcode.get(e.errno, str(e.errno))
        if not c:
            break
        data += c
    return "reached" if b"control-plane-reached" in data else "no-answer"

def probe(name, f):
    try:
        r = f()
        print(name + ":", r if isinstance(r, str) else answer(r), flush=True)
    except OSError as e:
        print(name + ":", "refused" if e.errno == errno.EPERM else "failed " + errno.errorcode.get(e.errno, str(e.errno)), flush=True)

def tcp():
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

def mptcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    s.settimeout(5); s.connect((host, port)); s.sendall(req); return s
def mptcp6():
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM, 262); return "made"
def sctp():
    socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132); return "made"
def tfo_sendto():
    s = tcp(); s.sendto(req, socket.MSG_FASTOPEN, (host, port)); return s
def tfo_sendmsg():
    s = tcp(); s.sendmsg([req], [], socket.MSG_FASTOPEN, (host, port)); return s
def tfo_sendmmsg():
    s = tcp()
    addr = ctypes.create_string_buffer(struct.pack("!HH4s8x", 0, port, socket.inet_aton(host)))
    struct.pack_into("=H", addr, 0, socket.AF_INET)
    buf = ctypes.create_string_buffer(req, len(req))
    iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), len(req))
    # struct mmsghdr: msghdr (name, namelen, iov, iovlen, control, controllen, flags) + msg_len
    hdr = struct.pack("=QI4xQQQQi4xI4x", ctypes.addressof(addr), 16, ctypes.addressof(iov), 1, 0, 0, 0, 0)
    mm = ctypes.create_string_buffer(hdr, len(hdr))
    syscall("sendmmsg", s.fileno(), ctypes.addressof(mm), 1, socket.MSG_FASTOPEN)
    return s
def tfo_connect():
    s = tcp(); s.setsockopt(socket.IPPROTO_TCP, 30, 1); s.settimeout(5); s.connect((host, port)); s.sendall(req); return s
def tfo_listen():
    s = tcp(); s.setsockopt(socket.IPPROTO_TCP, 23, 5); return "ok"
def listen_autobind():
    s = tcp(); s.listen(1); return "listening"
def netlink_diag():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4); return "made"
def netlink_route():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); return "made"
def netlink_uevent():
    socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15); return "made"
def dgram_pair_sendto():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b"via-sendto", dgram); return "sent"
def dgram_pair_connect():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.connect(dgram); a.send(b"via-connect"); return "sent"
def stream_pair_connect():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM); b.close(); a.connect(stream); return "made"
def stream_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM); a.send(b"x"); return "made" if b.recv(1) == b"x" else "no-answer"
def seqpacket_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET); return "made"
def unix_socket():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); return "made"
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM); return "made"
def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, 6); return "made"
def packet():
    socket.socket(17, socket.SOCK_RAW, 0); return "made"
def vsock():
    socket.socket(40, socket.SOCK_STREAM, 0); return "made"
def io_uring():
    p = ctypes.create_string_buffer(120); syscall("io_uring_setup", 4, ctypes.addressof(p)); return "ok"
def bpf():
    a = ctypes.create_string_buffer(128); syscall("bpf", 0, ctypes.addressof(a), 128); return "ok"
def userfaultfd():
    syscall("userfaultfd", 0); return "ok"
def userfaultfd_dev():
    import fcntl
    fd = os.open("/dev/userfaultfd", os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, 0xaa00, 0)  # USERFAULTFD_IOC_NEW
    return "ok"
def kvm():
    import fcntl
    fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, 0xae01, 0)  # KVM_CREATE_VM
    return "ok"
def perf():
    a = ctypes.create_string_buffer(128); struct.pack_into("=II", a, 0, 1, 128); syscall("perf_event_open", ctypes.addressof(a), 0, -1, -1, 0); return "ok"
def keyctl():
    syscall("keyctl", 0, -3, 0); return "ok"
def ptrace():
    syscall("ptrace", 16, victim, 0, 0); return "ok"
def vm_readv():
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    syscall("process_vm_readv", victim, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0); return "ok"
def unshare_user():
    syscall("unshare", 0x10000000); return "ok"
def mount():
    syscall("mount", 0, 0, 0, 0, 0); return "ok"

for n, f in [("mptcp", mptcp), ("mptcp6", mptcp6), ("sctp", sctp), ("tfo-sendto", tfo_sendto),
        ("tfo-sendmsg", tfo_sendmsg), ("tfo-sendmmsg", tfo_sendmmsg), ("tfo-connect", tfo_connect),
        ("tfo-listen", tfo_listen), ("listen-autobind", listen_autobind), ("netlink-diag", netlink_diag),
        ("netlink-route", netlink_route), ("netlink-uevent", netlink_uevent), ("dgram-pair-sendto", dgram_pair_sendto),
        ("dgram-pair-connect", dgram_pair_connect), ("stream-pair-connect", stream_pair_connect),
        ("stream-pair", stream_pair), ("seqpacket-pair", seqpacket_pair), ("unix-socket", unix_socket),
        ("udp", udp), ("raw", raw), ("packet", packet), ("vsock", vsock), ("io_uring", io_uring), ("bpf", bpf),
        ("userfaultfd", userfaultfd), ("userfaultfd-dev", userfaultfd_dev), ("kvm", kvm), ("perf_event_open", perf), ("keyctl", keyctl), ("ptrace", ptrace),
        ("process_vm_readv", vm_readv), ("unshare-user", unshare_user), ("mount", mount)]:
    probe(n, f)
print("probe: done", flush=True)
`

// verdicts parses the probe's output into name → verdict.
func verdicts(out string) map[string]string {
	v := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, verdict, ok := strings.Cut(line, ": "); ok {
			v[name] = verdict
		}
	}
	return v
}

// TestSocketSurface runs the probe with the network on, against a loopback
// listener standing in for the control plane (the Temporal frontend, NATS,
// PostgreSQL) and unix sockets of the host, in both modes. Every path that
// opens a connection without the checked connect(2) of a plain TCP socket
// is refused by the filter (EPERM), in both modes: MPTCP and SCTP sockets,
// TCP Fast Open through sendto, sendmsg, sendmmsg and TCP_FASTOPEN_CONNECT,
// datagram socketpairs (which can send to any unix datagram socket by
// path), netlink other than NETLINK_ROUTE (SOCK_DIAG lists every socket of
// a network namespace), and in Landlock mode listen(2), whose autobind
// listens on the host's network without the bind(2) Landlock checks. The
// unconfined control shows each path that reaches the listener does.
func TestSocketSurface(t *testing.T) {
	w := theWorld(t)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(w.control.URL, "http://"))
	victim := victimProcess(t)
	refusedBoth := []string{"mptcp", "mptcp6", "sctp", "tfo-sendto", "tfo-sendmsg", "tfo-sendmmsg", "tfo-connect",
		"netlink-diag", "netlink-uevent", "dgram-pair-sendto", "dgram-pair-connect", "unix-socket", "udp", "raw",
		"packet", "vsock", "io_uring", "bpf", "userfaultfd", "perf_event_open", "keyctl", "unshare-user", "mount"}
	// Refused one way or another (Landlock's ptrace scoping, a PID
	// namespace, missing capabilities): the call must not succeed.
	fail := []string{"ptrace", "process_vm_readv", "stream-pair-connect", "userfaultfd-dev", "kvm"}
	allowed := map[string]string{"netlink-route": "made", "stream-pair": "made", "seqpacket-pair": "made", "tfo-listen": "ok"}
	reachedUnconfined := []string{"mptcp", "tfo-sendto", "tfo-sendmsg", "tfo-sendmmsg", "tfo-connect", "dgram-pair-sendto", "dgram-pair-connect"}
	for _, m := range append(modes, sandbox.Off) {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			ws := workspace(t)
			dgram, stream := filepath.Join(ws, "src", "host.dgram"), filepath.Join(ws, "src", "host.stream")
			dl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
			must(t, err)
			defer dl.Close()
			sl, err := net.Listen("unix", stream)
			must(t, err)
			defer sl.Close()
			must(t, os.WriteFile(filepath.Join(ws, "src", "probe.py"), []byte(socketProbe), 0o644))
			r := run(t, b, ws, "exec python3 src/probe.py "+host+" "+port+" "+dgram+" "+stream+" "+victim, withNetwork)
			v := verdicts(r.out)
			if r.err != nil || v["probe"] != "done" {
				t.Fatalf("the probe did not run to its end (err %v, code %d):\n%s", r.err, r.code, r.out)
			}
			got := receivedDatagrams(dl)
			if m == sandbox.Off {
				for _, n := range reachedUnconfined {
					if v[n] != "reached" && v[n] != "sent" {
						t.Errorf("control: %s: %s unconfined, so the confined run proves nothing", n, v[n])
					}
				}
				if !strings.Contains(got, "via-sendto") || !strings.Contains(got, "via-connect") {
					t.Errorf("control: the host's datagram socket received %q unconfined", got)
				}
				return
			}
			for _, n := range refusedBoth {
				if v[n] != "refused" {
					t.Errorf("%s: %s, want refused (EPERM from the filter)", n, v[n])
				}
			}
			for _, n := range fail {
				if !strings.HasPrefix(v[n], "failed") && v[n] != "refused" {
					t.Errorf("%s: %s, want a failure", n, v[n])
				}
			}
			for n, want := range allowed {
				if v[n] != want {
					t.Errorf("%s: %s, want %s (still allowed)", n, v[n], want)
				}
			}
			wantListen := "listening" // in the call's own network namespace
			if m == sandbox.Landlock {
				wantListen = "refused" // the host's network
			}
			if v["listen-autobind"] != wantListen {
				t.Errorf("listen-autobind: %s, want %s", v["listen-autobind"], wantListen)
			}
			if got != "" {
				t.Errorf("the host's datagram socket received %q from a tool", got)
			}
			if strings.Contains(r.out, "reached") {
				t.Errorf("a tool reached the loopback listener:\n%s", r.out)
			}
		})
	}
}

// receivedDatagrams returns what l received (waiting briefly: the probe
// has finished, so anything sent is queued already).
func receivedDatagrams(l *net.UnixConn) string {
	var got []string
	buf := make([]byte, 64)
	for {
		_ = l.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, _, err := l.ReadFrom(buf)
		if err != nil {
			return strings.Join(got, ",")
		}
		got = append(got, string(buf[:n]))
	}
}
