// Package nfsimtest drives nfsim from Go tests: it starts `nfsim serve` (docs/serve-protocol.md)
// and wraps its requests in typed calls. Standard library only.
//
// The binary is $NFSIM_BIN, else nfsim on PATH.
//
//	s, err := nfsimtest.Start()
//	defer s.Close()
//	s.Node(nfsimtest.NodeSpec{Objects: yaml, Release: "none"})
//	f, err := s.Flow("udp 10.244.0.9:40000 -> 10.96.0.10:53", "1s")
//	fmt.Println(f.Fate, f.Endpoint)
package nfsimtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// ProtocolVersion is the serve protocol version this package speaks.
const ProtocolVersion = 1

// Error is an error response: the request at Line was refused; the session goes on.
type Error struct {
	Line     int     `json:"-"`
	Op       string  `json:"-"`
	Kind     string  `json:"kind"`
	Field    *string `json:"field"`
	Expected string  `json:"expected"`
	Message  string  `json:"message"`
}

func (e *Error) Error() string {
	field := "-"
	if e.Field != nil {
		field = *e.Field
	}
	return fmt.Sprintf("request line %d (%s): %s [%s, field %s; expected %s]", e.Line, e.Op, e.Message, e.Kind, field, e.Expected)
}

// Binary is the nfsim binary: $NFSIM_BIN, else nfsim on PATH.
func Binary() (string, error) {
	if b := os.Getenv("NFSIM_BIN"); b != "" {
		return b, nil
	}
	return exec.LookPath("nfsim")
}

// Session is one `nfsim serve` process, after its hello.
type Session struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// Start starts `nfsim serve` and says hello.
func Start() (*Session, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Session{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	if _, err := s.Request(map[string]any{"op": "hello", "version": ProtocolVersion}, nil); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close ends the session and waits for the process.
func (s *Session) Close() error {
	s.in.Close()
	return s.cmd.Wait()
}

// Raw sends one line as it is and returns the answer line (for protocol tests).
func (s *Session) Raw(line string) (string, error) {
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		return "", err
	}
	answer, err := s.out.ReadString('\n')
	return strings.TrimSuffix(answer, "\n"), err
}

// Request sends one request object and decodes a successful answer into into (if not nil).
// An error response is returned as *Error. Fields with a nil or empty-string value are left out.
func (s *Session) Request(req map[string]any, into any) (json.RawMessage, error) {
	for k, v := range req {
		if v == nil || v == "" {
			delete(req, k)
		}
	}
	line, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	answer, err := s.Raw(string(line))
	if err != nil {
		return nil, fmt.Errorf("nfsim serve: %w", err)
	}
	var head struct {
		OK    bool   `json:"ok"`
		Line  int    `json:"line"`
		Op    string `json:"op"`
		Error *Error `json:"error"`
	}
	if err := json.Unmarshal([]byte(answer), &head); err != nil {
		return nil, fmt.Errorf("nfsim serve answered %q: %w", answer, err)
	}
	if !head.OK {
		if head.Error == nil {
			return nil, errors.New("nfsim serve: error response without an error")
		}
		head.Error.Line, head.Error.Op = head.Line, head.Op
		return nil, head.Error
	}
	if into != nil {
		if err := json.Unmarshal([]byte(answer), into); err != nil {
			return nil, err
		}
	}
	return json.RawMessage(answer), nil
}

// Instant is a simulated time.
type Instant struct {
	Ns   uint64 `json:"ns"`
	Time string `json:"time"`
}

// NodeSpec is what the node request takes; empty fields take nfsim's defaults.
type NodeSpec struct {
	Rules   string // iptables-save text
	Nft     string // nft -f text
	Objects string // Service and EndpointSlice YAML
	Release string // kube-proxy's stale-UDP cleanup: none, v1.31, …, latest
	Mode    string // iptables or nftables
	Seed    uint64
	Address string
}

// Node builds the session's node.
func (s *Session) Node(spec NodeSpec) error {
	req := map[string]any{"op": "node", "rules": spec.Rules, "nft": spec.Nft, "objects": spec.Objects,
		"release": spec.Release, "mode": spec.Mode, "address": spec.Address}
	if spec.Seed != 0 {
		req["seed"] = spec.Seed
	}
	_, err := s.Request(req, nil)
	return err
}

// Scenario loads a scenario file.
func (s *Session) Scenario(file string) error {
	_, err := s.Request(map[string]any{"op": "scenario", "file": file}, nil)
	return err
}

// Tuple is one direction of a conntrack entry.
type Tuple struct {
	Src   string `json:"src"`
	Dst   string `json:"dst"`
	Sport uint16 `json:"sport"`
	Dport uint16 `json:"dport"`
}

// Entry is a conntrack entry: its tuples and its `conntrack -L` line.
type Entry struct {
	Proto string `json:"proto"`
	Orig  Tuple  `json:"orig"`
	Reply Tuple  `json:"reply"`
	Mark  uint32 `json:"mark"`
	Line  string `json:"line"`
}

// NatPair is a rewritten address.
type NatPair struct {
	Before string `json:"before"`
	After  string `json:"after"`
}

// Flow is what happened to one packet.
type Flow struct {
	At       Instant  `json:"at"`
	Packet   string   `json:"packet"`
	Ingress  string   `json:"ingress"`
	Fate     string   `json:"fate"`
	Reason   *string  `json:"reason"`
	Endpoint *string  `json:"endpoint"`
	Source   *string  `json:"source"`
	Dnat     *NatPair `json:"dnat"`
	Snat     *NatPair `json:"snat"`
	Entry    *Entry   `json:"entry"`
	Trace    *string  `json:"trace"`
}

// Flow sends a packet through the node at instant at ("" for now).
func (s *Session) Flow(packet, at string) (*Flow, error) {
	var f Flow
	_, err := s.Request(map[string]any{"op": "flow", "packet": packet, "at": at}, &f)
	return &f, err
}

// Advance moves simulated time to at, running kube-proxy's syncs due.
func (s *Session) Advance(at string) error {
	_, err := s.Request(map[string]any{"op": "advance", "at": at}, nil)
	return err
}

// Conntrack lists the entries matching conntrack -L options; text is as conntrack -L prints it.
func (s *Session) Conntrack(filter string) (entries []Entry, text string, err error) {
	var r struct {
		Entries []Entry `json:"entries"`
		Text    string  `json:"text"`
	}
	_, err = s.Request(map[string]any{"op": "conntrack", "filter": filter}, &r)
	return r.Entries, r.Text, err
}

// Delete deletes the entries matching conntrack -D options; returns how many.
func (s *Session) Delete(filter string) (int, error) {
	var r struct {
		Count int `json:"count"`
	}
	_, err := s.Request(map[string]any{"op": "delete", "filter": filter}, &r)
	return r.Count, err
}

// Rules is the node's iptables-save (format "iptables") or nft list ruleset ("nft") text.
func (s *Session) Rules(format string) (string, error) {
	var r struct {
		Text string `json:"text"`
	}
	_, err := s.Request(map[string]any{"op": "rules", "format": format}, &r)
	return r.Text, err
}

// Probability is an exact probability and its approximations.
type Probability struct {
	Fraction string  `json:"fraction"`
	Decimal  string  `json:"decimal"`
	Float    float64 `json:"float"`
}

// Choice is one rule of a chain that can take a new packet.
type Choice struct {
	Rule        int         `json:"rule"`
	Target      string      `json:"target"`
	Endpoint    *string     `json:"endpoint"`
	Probability Probability `json:"probability"`
}

// Selection is what a chain does with a new packet, by exact probability.
type Selection struct {
	Chain       string      `json:"chain"`
	Choices     []Choice    `json:"choices"`
	FallThrough Probability `json:"fallThrough"`
}

// Selection is the exact branch probabilities of a nat chain.
func (s *Session) Selection(chain string) (*Selection, error) {
	var r Selection
	_, err := s.Request(map[string]any{"op": "selection", "chain": chain}, &r)
	return &r, err
}

// Restore runs an iptables-restore (format "iptables") or nft -f ("nft") payload on the node.
func (s *Session) Restore(format, payload string) error {
	_, err := s.Request(map[string]any{"op": "restore", "format": format, "payload": payload}, nil)
	return err
}

// Apply creates or replaces kube-proxy's objects (YAML) at instant at.
func (s *Session) Apply(objects, at string) error {
	_, err := s.Request(map[string]any{"op": "apply", "objects": objects, "at": at}, nil)
	return err
}

// ServiceYAML is a Service default/name at clusterIP:port and its EndpointSlice; the endpoints
// in notServing have ready and serving false.
func ServiceYAML(name, clusterIP string, port int, protocol string, endpoints []string, notServing ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: default}\nspec:\n  clusterIP: %s\n  ports: [{name: p%d, port: %d, protocol: %s, targetPort: %d}]\n", name, clusterIP, port, port, protocol, port)
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: default\n  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\nendpoints:\n", name, name)
	for _, ip := range endpoints {
		up := "true"
		for _, n := range notServing {
			if n == ip {
				up = "false"
			}
		}
		fmt.Fprintf(&b, "  - {addresses: [%s], conditions: {ready: %s, serving: %s}}\n", ip, up, up)
	}
	fmt.Fprintf(&b, "ports: [{name: p%d, port: %d, protocol: %s}]\n", port, port, protocol)
	return b.String()
}

// SvcChainOf is the KUBE-SVC chain kube-proxy's KUBE-SERVICES rule sends clusterIP:port to.
func SvcChainOf(rules, clusterIP string, port int) (string, error) {
	for _, line := range strings.Split(rules, "\n") {
		if strings.HasPrefix(line, "-A KUBE-SERVICES ") &&
			strings.Contains(line, " -d "+clusterIP+"/32 ") &&
			strings.Contains(line, fmt.Sprintf(" --dport %d ", port)) &&
			strings.Contains(line, " -j KUBE-SVC-") {
			i := strings.LastIndex(line, " -j ")
			return strings.TrimSpace(line[i+4:]), nil
		}
	}
	return "", fmt.Errorf("no KUBE-SERVICES rule for %s:%d", clusterIP, port)
}
