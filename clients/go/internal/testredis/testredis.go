// Package testredis starts real redis-server processes for the tests: with the module loaded or
// without it (the script's path), alone or as a three-master Redis Cluster, each on a free
// loopback port in a fresh directory. Binaries: $REDIS_SERVER and $REDIS_CLI (else redis-server
// and redis-cli on PATH); module: $SLIDINGWINDOW_MODULE, else target/release/libslidingwindow.so
// at the repository's root.
package testredis

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"
)

// StartupDeadline bounds the wait for a server, and for a cluster, to be ready.
const StartupDeadline = 30 * time.Second

// Server is one redis-server process that this package spawned.
type Server struct {
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	pool *redis.Pool
}

// ModulePath is the module to load.
func ModulePath() (string, error) {
	path := os.Getenv("SLIDINGWINDOW_MODULE")
	if path == "" {
		_, file, _, _ := runtime.Caller(0)
		path = filepath.Join(filepath.Dir(file), "../../../../target/release/libslidingwindow.so")
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("module %s not found: run `make build` (or set SLIDINGWINDOW_MODULE): %w", path, err)
	}
	return path, nil
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// freePort is a free loopback port; with bus, one whose cluster bus port (+10000, at most 65535) is
// free too (a cluster node on another port exits at start).
func freePort(bus bool) (int, error) {
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port, nil
		}
		if port > 65535-10000 {
			continue
		}
		if b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			b.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port with a free port + 10000 after 100 tries")
}

// Start spawns a server, with the module loaded when module is true, and extra arguments.
func Start(module bool, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "slidingwindow-go-")
	if err != nil {
		return nil, err
	}
	var args []string
	if module {
		path, err := ModulePath()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "--loadmodule", path)
	}
	return spawn(dir, nil, append(args, extra...))
}

// SentinelMaster is the name a Sentinel from StartSentinel knows its master by.
const SentinelMaster = "mymaster"

// StartSentinel spawns a Sentinel (redis-server --sentinel) that monitors master as
// SentinelMaster, alone (quorum 1).
func StartSentinel(master *Server) (*Server, error) {
	dir, err := os.MkdirTemp("", "slidingwindow-go-sentinel-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", SentinelMaster, master.Port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return spawn(dir, []string{conf, "--sentinel"}, nil)
}

// spawn starts redis-server with lead (a config file first), then a free port, the directory dir
// and args, and waits until it answers; on failure it removes dir.
func spawn(dir string, lead, args []string) (*Server, error) {
	// A replica's full sync starts at once, not after the default 5 s.
	args = append([]string{"--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no", "--logfile", "redis.log", "--repl-diskless-sync-delay", "0"}, args...)
	// The probed port may be taken before the server binds it: try a few.
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(slices.Contains(args, "--cluster-enabled"))
		if err != nil {
			break
		}
		s := &Server{Port: port, dir: dir, done: make(chan struct{})}
		argv := append(append(append([]string{}, lead...), "--port", strconv.Itoa(port)), args...)
		s.cmd = exec.Command(env("REDIS_SERVER", "redis-server"), argv...)
		if err := s.cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		go func() { s.cmd.Wait(); close(s.done) }()
		s.pool = &redis.Pool{
			MaxIdle: 64,
			Dial: func() (redis.Conn, error) {
				return redis.Dial("tcp", s.Addr(), redis.DialReadTimeout(30*time.Second), redis.DialWriteTimeout(30*time.Second))
			},
		}
		if s.waitReady() {
			return s, nil
		}
		s.stop()
	}
	log := readLog(dir)
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server did not start:\n%s", log)
}

// waitReady polls until the server answering on the port is the process spawned (INFO's
// process_id), or the process has exited.
func (s *Server) waitReady() bool {
	deadline := time.Now().Add(StartupDeadline)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return false
		default:
		}
		c, err := redis.Dial("tcp", s.Addr(), redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
		if err == nil {
			info, err := redis.String(c.Do("INFO", "server"))
			c.Close()
			if err == nil && strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", s.cmd.Process.Pid)) {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Pool is a connection pool to the server.
func (s *Server) Pool() *redis.Pool { return s.pool }

// Do runs one command on a pooled connection.
func (s *Server) Do(name string, args ...any) (any, error) {
	c := s.pool.Get()
	defer c.Close()
	return c.Do(name, args...)
}

// Log is the end of the server's log file.
func (s *Server) Log() string { return readLog(s.dir) }

func readLog(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop kills the process and closes the pool; the directory stays.
func (s *Server) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done
	}
	if s.pool != nil {
		s.pool.Close()
	}
}

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.stop()
	os.RemoveAll(s.dir)
}

// Cluster is three masters made into a Redis Cluster as `redis-cli --cluster create` makes one.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts the three nodes and waits until each says cluster_state:ok.
func StartCluster(module bool) (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		s, err := Start(module, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000")
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	// What `redis-cli --cluster create` does, without its waits of a second: a config epoch each,
	// a third of the slots each (its ranges), a MEET of each node to the first.
	ranges := [3][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range c.Nodes {
		if _, err := n.Do("CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			c.Close()
			return nil, fmt.Errorf("CLUSTER SET-CONFIG-EPOCH: %w", err)
		}
		if _, err := n.Do("CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]); err != nil {
			c.Close()
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
		}
	}
	for _, n := range c.Nodes[1:] {
		if _, err := n.Do("CLUSTER", "MEET", "127.0.0.1", c.Nodes[0].Port); err != nil {
			c.Close()
			return nil, fmt.Errorf("CLUSTER MEET: %w", err)
		}
	}
	deadline := time.Now().Add(StartupDeadline)
	for !c.ok() {
		if time.Now().After(deadline) {
			c.Close()
			return nil, errors.New("the cluster did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, nil
}

func (c *Cluster) ok() bool {
	for _, n := range c.Nodes {
		info, err := redis.String(n.Do("CLUSTER", "INFO"))
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}

// Addrs is every node's host:port.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// Client is a redisc cluster client seeded with every node, its mapping loaded.
func (c *Cluster) Client() (*redisc.Cluster, error) {
	cl := &redisc.Cluster{
		StartupNodes: c.Addrs(),
		DialOptions:  []redis.DialOption{redis.DialConnectTimeout(5 * time.Second)},
		CreatePool: func(addr string, opts ...redis.DialOption) (*redis.Pool, error) {
			return &redis.Pool{MaxIdle: 16, Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr, opts...) }}, nil
		},
	}
	if err := cl.Refresh(); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}

var (
	sharedMu sync.Mutex
	shared   = map[bool]*Server{}
)

// Shared is one server per kind (with the module or without) for the whole test binary,
// started on first use; Main stops them.
func Shared(t testing.TB, module bool) *Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[module]; ok {
		return s
	}
	s, err := Start(module)
	if err != nil {
		t.Fatal(err)
	}
	shared[module] = s
	return s
}

// Main runs the tests, then stops the shared servers.
func Main(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	for _, s := range shared {
		s.Close()
	}
	sharedMu.Unlock()
	return code
}
