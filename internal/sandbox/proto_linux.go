package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/internal/egress"
)

// The worker and its helper talk over a unix stream socket: each message is
// a 4-byte big-endian length and a JSON body; file descriptors (a call's
// stdin, stdout and stderr) travel as SCM_RIGHTS with the length.

// helperConfig is the helper's first message: everything static.
type helperConfig struct {
	Mode   Mode          `json:"mode"`
	Hidden []string      `json:"hidden"`
	Egress egress.Policy `json:"egress"`
	// Shell is the absolute path of the shell each namespaces-mode call
	// runs as its init (checked by the worker: owned by root, writable by
	// no one else).
	Shell string `json:"shell,omitempty"`
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	// LandlockABI, when below the kernel's, is the ABI the helper uses
	// instead (tests of older kernels' paths).
	LandlockABI int `json:"landlockABI,omitempty"`
}

// request is a worker → helper message.
type request struct {
	Op string `json:"op"` // "start", "signal" or "deny"
	ID uint64 `json:"id"`
	// start
	Path      string   `json:"path,omitempty"`
	Args      []string `json:"args,omitempty"`
	Env       []string `json:"env,omitempty"`
	Dir       string   `json:"dir,omitempty"`
	Writable  []string `json:"writable,omitempty"`
	Protected []string `json:"protected,omitempty"`
	Hidden    []string `json:"hidden,omitempty"`
	Visible   []string `json:"visible,omitempty"`
	Network   bool     `json:"network,omitempty"`
	// Deny is the control plane as the worker knows it now (a network
	// call's): the helper's proxy refuses it from this call on.
	Deny []egress.Dest `json:"deny,omitempty"`
	// signal (to the call's whole process group)
	Signal int `json:"signal,omitempty"`
}

// event is a helper → worker message.
type event struct {
	Op string `json:"op"` // "ready", "started", "exited", "denied"
	ID uint64 `json:"id,omitempty"`
	// ready: what the helper enforces; started: the tool's PID where the
	// worker can see it (0 in namespaces mode).
	Status *Status `json:"status,omitempty"`
	Pid    int     `json:"pid,omitempty"`
	// exited: the wait status.
	Wait int `json:"wait,omitempty"`
	// ready or started: why it failed.
	Err string `json:"err,omitempty"`
}

// maxMessage bounds one message (a bash command is at most ARG_MAX, 2 MiB).
const maxMessage = 8 << 20

// conn frames messages on a unix stream socket.
type conn struct {
	c  *net.UnixConn
	wm sync.Mutex
}

func newConn(f *os.File) (*conn, error) {
	fc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		_ = fc.Close()
		return nil, fmt.Errorf("sandbox: control socket is %T", fc)
	}
	return &conn{c: uc}, nil
}

// send writes v with the descriptors fds.
func (c *conn) send(v any, fds ...int) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > maxMessage {
		return fmt.Errorf("sandbox: message of %d bytes is too large", len(body))
	}
	msg := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(msg, uint32(len(body))) //nolint:gosec // G115: bounded by maxMessage
	copy(msg[4:], body)
	c.wm.Lock()
	defer c.wm.Unlock()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.c.WriteMsgUnix(msg, oob, nil)
	for err == nil && n < len(msg) {
		var m int
		m, err = c.c.Write(msg[n:])
		n += m
	}
	return err
}

// recv reads the next message into v and returns the descriptors that came
// with it (the caller owns them).
func (c *conn) recv(v any) ([]*os.File, error) {
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(4*8))
	got := 0
	var files []*os.File
	for got < len(hdr) {
		n, oobn, _, _, err := c.c.ReadMsgUnix(hdr[got:], oob)
		if oobn > 0 {
			fs, perr := parseRights(oob[:oobn])
			files = append(files, fs...)
			if perr != nil {
				closeAll(files)
				return nil, perr
			}
		}
		if err != nil {
			closeAll(files)
			return nil, err
		}
		if n == 0 {
			closeAll(files)
			return nil, io.EOF
		}
		got += n
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > maxMessage {
		closeAll(files)
		return nil, fmt.Errorf("sandbox: message of %d bytes is too large", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.c, body); err != nil {
		closeAll(files)
		return nil, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		closeAll(files)
		return nil, fmt.Errorf("sandbox: bad message: %w", err)
	}
	return files, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "sandbox-fd"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
