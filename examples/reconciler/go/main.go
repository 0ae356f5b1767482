// A stale-UDP conntrack reconciler for nfsim, in Go (standard library only).
//
// It speaks nfsim's reconciler protocol (docs/reconciler-protocol.md) on stdin/stdout and does
// what kube-proxy's current cleanup does (pkg/proxy/conntrack/cleanup.go): after each sync,
// for every UDP service port, list the entries to its cluster IP and port and delete those
// whose reply source is not a serving endpoint of that port. Wrap real kube-proxy code the
// same way: decode "sync" into its service and endpoint maps, and give it a conntrack
// interface whose List/Delete send "list"/"delete" lines.
//
//	go build -o reconciler . && nfsim run scenario.yaml   # kubeProxy.cleanup.command: [./reconciler]
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

type endpoint struct {
	IP      string `json:"ip"`
	Port    int    `json:"port"`
	Serving bool   `json:"serving"`
}

type service struct {
	Name      string     `json:"name"`
	Protocol  string     `json:"protocol"`
	ClusterIP string     `json:"clusterIP"`
	Port      int        `json:"port"`
	Endpoints []endpoint `json:"endpoints"`
}

type tuple struct {
	Src   string `json:"src"`
	Dst   string `json:"dst"`
	Sport int    `json:"sport"`
	Dport int    `json:"dport"`
}

type entry struct {
	Proto string `json:"proto"`
	Orig  tuple  `json:"orig"`
	Reply tuple  `json:"reply"`
}

type message struct {
	Type     string    `json:"type"`
	Services []service `json:"services"`
	Entries  []entry   `json:"entries"`
	Count    int       `json:"count"`
}

var (
	in  = bufio.NewReader(os.Stdin)
	out = bufio.NewWriter(os.Stdout)
)

func send(m map[string]any) {
	b, _ := json.Marshal(m)
	out.Write(append(b, '\n'))
	out.Flush()
}

func recv() message {
	line, err := in.ReadBytes('\n')
	if err != nil {
		os.Exit(0) // nfsim closed our stdin: the run is over
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(os.Stderr, "bad message %q: %v\n", line, err)
		os.Exit(2)
	}
	return m
}

func request(m map[string]any, expect string) message {
	send(m)
	a := recv()
	if a.Type != expect {
		fmt.Fprintf(os.Stderr, "expected %s, got %+v\n", expect, a)
		os.Exit(2)
	}
	return a
}

func reconcile(sync message) {
	for _, svc := range sync.Services {
		if svc.Protocol != "UDP" {
			continue
		}
		serving := map[string]bool{}
		for _, e := range svc.Endpoints {
			if e.Serving {
				serving[fmt.Sprintf("%s:%d", e.IP, e.Port)] = true
			}
		}
		listed := request(map[string]any{
			"type":   "list",
			"filter": fmt.Sprintf("-p udp --orig-dst %s --orig-port-dst %d", svc.ClusterIP, svc.Port),
		}, "entries")
		stale := map[string]tuple{}
		for _, e := range listed.Entries {
			k := fmt.Sprintf("%s:%d", e.Reply.Src, e.Reply.Sport)
			if !serving[k] {
				stale[k] = e.Reply
			}
		}
		keys := make([]string, 0, len(stale))
		for k := range stale {
			keys = append(keys, k)
		}
		sort.Strings(keys) // a fixed order: the same run every time
		for _, k := range keys {
			r := stale[k]
			request(map[string]any{
				"type": "delete",
				"filter": fmt.Sprintf("-p udp --orig-dst %s --orig-port-dst %d --reply-src %s --reply-port-src %d",
					svc.ClusterIP, svc.Port, r.Src, r.Sport),
				"reason": fmt.Sprintf("%s is not a serving endpoint of %s", k, svc.Name),
			}, "deleted")
		}
	}
	send(map[string]any{"type": "done"})
}

func main() {
	for {
		m := recv()
		if m.Type != "sync" {
			fmt.Fprintf(os.Stderr, "unexpected message %+v\n", m)
			os.Exit(2)
		}
		reconcile(m)
	}
}
