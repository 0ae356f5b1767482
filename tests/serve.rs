//! `nfsim serve` (docs/serve-protocol.md): a session's answers are the testkit's answers for
//! the same node and packets; the same requests give the same bytes; bad requests are
//! located, typed errors after which the session goes on; the binary does the line I/O.

use nfsim::serve::{Session, MAX_REQUEST_BYTES};
use nfsim::testkit::examples::{service_with_endpoints, svc_chain, KUBE_DNS_TWO_ENDPOINTS};
use nfsim::testkit::{Cluster, Node, Origin, SimTime};
use serde_json::{json, Value};

/// A session after its hello.
fn session() -> Session {
    let mut s = Session::new();
    let hello = ask(&mut s, &json!({"op": "hello", "version": 1}));
    assert_eq!(hello["version"], 1);
    s
}

/// One request; the answer must be ok.
fn ask(s: &mut Session, req: &Value) -> Value {
    let v = answer(s, &req.to_string());
    assert_eq!(v["ok"], true, "{req} → {v}");
    v
}

/// One request line, the answer parsed.
fn answer(s: &mut Session, line: &str) -> Value {
    serde_json::from_str(&s.handle_line(line.as_bytes())).unwrap()
}

/// An error answer's `(line, kind, field)`.
fn error(v: &Value) -> (u64, String, Option<String>) {
    assert_eq!(v["ok"], false, "{v}");
    let e = &v["error"];
    assert!(e["expected"].as_str().is_some_and(|x| !x.is_empty()), "{v}");
    assert!(e["message"].as_str().is_some_and(|x| !x.is_empty()), "{v}");
    (
        v["line"].as_u64().unwrap(),
        e["kind"].as_str().unwrap().to_string(),
        e["field"].as_str().map(str::to_string),
    )
}

fn t(ms: u64) -> SimTime {
    SimTime::from_millis(ms)
}

fn at(ms: u64) -> String {
    format!("{ms}ms")
}

#[test]
fn flows_conntrack_rules_and_selection_equal_the_testkit_node() {
    let yaml = service_with_endpoints("web", "10.96.5.5", 80, "TCP", 5);
    let mut node = Node::builder().objects(&yaml).seed(9).build().unwrap();
    let mut s = session();
    ask(&mut s, &json!({"op": "node", "objects": yaml, "seed": 9}));
    for i in 0..40u64 {
        let pkt = format!(
            "tcp 10.244.0.{}:{} -> 10.96.5.5:80 SYN",
            2 + i % 7,
            30000 + i
        );
        let mine = node.flow(t(i * 10), &pkt).unwrap();
        let theirs = ask(
            &mut s,
            &json!({"op": "flow", "packet": pkt, "at": at(i * 10)}),
        );
        assert_eq!(theirs["fate"], "transmitted");
        assert_eq!(theirs["endpoint"], mine.endpoint().unwrap().to_string());
        assert_eq!(theirs["ingress"], mine.ingress);
        assert_eq!(
            theirs["entry"]["line"],
            mine.entry
                .as_ref()
                .unwrap()
                .list_line(t(i * 10))
                .to_string()
        );
        assert_eq!(theirs["dnat"]["after"], mine.dnat().unwrap().1.to_string());
    }
    let ct = ask(
        &mut s,
        &json!({"op": "conntrack", "filter": "-p tcp --orig-dst 10.96.5.5"}),
    );
    assert_eq!(
        ct["text"],
        node.conntrack_text("-p tcp --orig-dst 10.96.5.5").unwrap()
    );
    assert_eq!(ct["entries"].as_array().unwrap().len(), 40);
    assert_eq!(ask(&mut s, &json!({"op": "rules"}))["text"], node.rules());
    let chain = svc_chain("default/web:p80", "tcp");
    let sel = ask(&mut s, &json!({"op": "selection", "chain": chain}));
    let exact = node.selection(&chain).unwrap();
    let fractions: Vec<String> = exact
        .choices
        .iter()
        .map(|c| c.probability.fraction())
        .collect();
    let served: Vec<String> = sel["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["probability"]["fraction"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(served, fractions);
    assert_eq!(fractions[0], "214748365/1073741824");
    // Deleting by filter removes what the testkit's delete removes.
    let gone = node
        .conntrack_delete(t(500), "-p tcp --orig-port-src 30003")
        .unwrap();
    let del = ask(
        &mut s,
        &json!({"op": "delete", "filter": "-p tcp --orig-port-src 30003", "at": "500ms"}),
    );
    assert_eq!(del["count"], gone.len());
    assert_eq!(gone.len(), 1);
}

#[test]
fn the_stale_dns_incident_through_the_session() {
    let mut s = session();
    ask(
        &mut s,
        &json!({"op": "node", "objects": KUBE_DNS_TWO_ENDPOINTS, "release": "none"}),
    );
    let q = "udp 10.244.0.9:40000 -> 10.96.0.10:53";
    let first = ask(&mut s, &json!({"op": "flow", "packet": q, "at": "1s"}));
    let first = first["endpoint"].as_str().unwrap().to_string();
    let (gone_ip, live) = if first == "10.244.1.5:53" {
        ("10.244.1.5", "10.244.2.5:53")
    } else {
        ("10.244.2.5", "10.244.1.5:53")
    };
    let not_serving = KUBE_DNS_TWO_ENDPOINTS.replace(
        &format!("{{addresses: [{gone_ip}], conditions: {{ready: true}}"),
        &format!("{{addresses: [{gone_ip}], conditions: {{ready: false, serving: false}}"),
    );
    assert_ne!(not_serving, KUBE_DNS_TWO_ENDPOINTS);
    ask(
        &mut s,
        &json!({"op": "apply", "objects": not_serving, "at": "2s"}),
    );
    ask(&mut s, &json!({"op": "advance", "at": "3s"}));
    // The stale entry still sends the fixed-port client to the endpoint that went away.
    let stale = ask(&mut s, &json!({"op": "flow", "packet": q, "at": "4s"}));
    assert_eq!(stale["endpoint"], first);
    let filter = format!("-p udp --orig-dst 10.96.0.10 --reply-src {gone_ip}");
    let del = ask(&mut s, &json!({"op": "delete", "filter": filter}));
    assert_eq!(del["count"], 1);
    let after = ask(&mut s, &json!({"op": "flow", "packet": q, "at": "5s"}));
    assert_eq!(after["endpoint"], live);
}

#[test]
fn restore_and_nft_payloads_change_the_node_as_the_testkit_does() {
    let rules = std::fs::read_to_string("tests/fixtures/iptables/k3s-node.save").unwrap();
    let nft = std::fs::read_to_string("tests/fixtures/nft/kube-proxy-base.nft").unwrap();
    let drop = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp --dport 9999 -j DROP\nCOMMIT\n";
    let mut node = Node::builder()
        .rules(&rules)
        .pod_cidr(Some("10.42.0.0/16"))
        .build()
        .unwrap();
    node.netns_mut().restore(drop, true).unwrap();
    node.netns_mut().nft_apply("payload", &nft, t(0)).unwrap();
    let mut s = session();
    ask(
        &mut s,
        &json!({"op": "node", "rules": rules, "podCidr": "10.42.0.0/16"}),
    );
    ask(
        &mut s,
        &json!({"op": "restore", "payload": drop, "noflush": true}),
    );
    ask(
        &mut s,
        &json!({"op": "restore", "format": "nft", "payload": nft}),
    );
    assert_eq!(ask(&mut s, &json!({"op": "rules"}))["text"], node.rules());
    assert_eq!(
        ask(&mut s, &json!({"op": "rules", "format": "nft"}))["text"],
        node.netns().nft().list_ruleset(node.now())
    );
    let f = ask(
        &mut s,
        &json!({"op": "flow", "packet": "udp 172.18.0.99:5000 -> 172.18.0.2:9999", "at": "1s"}),
    );
    assert_eq!(f["fate"], "dropped");
    assert_eq!(f["reason"], "dropped by filter INPUT");
    // Without --noflush, iptables-restore flushes the tables it names: the DROP is gone.
    let flush = "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n";
    ask(&mut s, &json!({"op": "restore", "payload": flush}));
    let f = ask(
        &mut s,
        &json!({"op": "flow", "packet": "udp 172.18.0.99:5001 -> 172.18.0.2:9999", "at": "2s"}),
    );
    assert_eq!(f["fate"], "delivered");
}

#[test]
fn saved_state_loads_as_the_cli_loads_it() {
    let mut s = session();
    ask(&mut s, &json!({"op": "node"}));
    let r = ask(
        &mut s,
        &json!({"op": "state", "conntrack": "tests/fixtures/conntrack/listing.txt", "after": "1s"}),
    );
    assert!(
        r["notes"][0].as_str().unwrap().contains("4 entries loaded"),
        "{r}"
    );
    let mut node = Node::builder().build().unwrap();
    let loaded = nfsim::explain::load_saved_state(
        node.netns_mut(),
        &nfsim::explain::SavedState {
            sysctl_file: None,
            sysctls: &[],
            conntrack: Some("tests/fixtures/conntrack/listing.txt"),
            assumed_age: nfsim::explain::DEFAULT_ASSUMED_AGE,
            recent: &[],
            recent_clock: Default::default(),
            after: nfsim::testkit::SimDuration::from_secs(1),
        },
    )
    .unwrap();
    node.sync_due(loaded.at).unwrap();
    let ct = ask(&mut s, &json!({"op": "conntrack"}));
    assert_eq!(ct["text"], node.conntrack_text("").unwrap());
    assert_eq!(ct["entries"].as_array().unwrap().len(), 4);
    // Saved state is the starting state: not after the first flow.
    ask(
        &mut s,
        &json!({"op": "flow", "packet": "udp 127.0.0.3:40000 -> 127.0.0.4:53"}),
    );
    let again = answer(
        &mut s,
        r#"{"op":"state","conntrack":"tests/fixtures/conntrack/listing.txt","after":"2s"}"#,
    );
    assert_eq!(error(&again).1, "state");
}

#[test]
fn a_scenario_session_equals_the_testkit_cluster() {
    let file = "scenarios/stale-dns-udp.yaml";
    let mut c = Cluster::from_file(file).unwrap();
    c.run_until(SimTime::from_secs(60)).unwrap();
    let id = c
        .send(
            &Origin::Pod("default/app".into()),
            "udp 10.244.2.9:41000 -> 10.96.0.10:53",
        )
        .unwrap();
    c.run_until(SimTime::from_secs(61)).unwrap();
    let mut s = session();
    let sc = ask(&mut s, &json!({"op": "scenario", "file": file}));
    assert_eq!(sc["nodes"], json!(["node-1", "node-2"]));
    ask(&mut s, &json!({"op": "advance", "at": "60s"}));
    let f = ask(
        &mut s,
        &json!({"op": "flow", "from": "pod default/app", "packet": "udp 10.244.2.9:41000 -> 10.96.0.10:53"}),
    );
    assert_eq!(f["flow"], id);
    ask(&mut s, &json!({"op": "advance", "at": "61s"}));
    let seen = ask(&mut s, &json!({"op": "sightings", "flow": id}));
    let machines: Vec<&str> = seen["sightings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["machine"].as_str().unwrap())
        .collect();
    let theirs: Vec<String> = c.sightings(id).into_iter().map(|x| x.machine).collect();
    assert_eq!(machines, theirs);
    assert!(machines.contains(&"pod default/app"));
    for node in ["node-1", "node-2"] {
        let ct = ask(&mut s, &json!({"op": "conntrack", "node": node}));
        assert_eq!(ct["text"], c.conntrack_text(node, "").unwrap());
        assert_eq!(
            ask(&mut s, &json!({"op": "rules", "node": node}))["text"],
            c.rules(node).unwrap()
        );
    }
    // A scenario event applied in the session is checked like the file's own, and runs.
    ask(
        &mut s,
        &json!({"op": "apply", "event": {"at": "70s", "readiness": {"pod": "coredns-b", "ready": false}}}),
    );
    let bad = answer(
        &mut s,
        r#"{"op":"apply","event":{"at":"80s","readiness":{"pod":"nope","ready":false}}}"#,
    );
    let (_, kind, field) = error(&bad);
    assert_eq!(
        (kind.as_str(), field.as_deref()),
        ("bad_value", Some("event"))
    );
    assert!(bad["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown pod \"nope\""));
    ask(&mut s, &json!({"op": "advance", "at": "170s"}));
    let ep = ask(&mut s, &json!({"op": "rules", "node": "node-2"}));
    assert!(
        !ep["text"].as_str().unwrap().contains("10.244.2.5:53"),
        "coredns-b is not ready: no endpoint rule"
    );
}

/// The fixture sessions, answered twice: the same bytes.
#[test]
fn the_same_requests_give_the_same_bytes() {
    for f in ["stale-dns", "rules", "scenario", "out-of-order", "state"] {
        let text = std::fs::read(format!("tests/fixtures/serve/{f}.jsonl")).unwrap();
        let run = || {
            let mut s = Session::new();
            text.split(|b| *b == b'\n')
                .map(|l| s.handle_line(l) + "\n")
                .collect::<String>()
        };
        let a = run();
        assert_eq!(a, run(), "{f}");
        assert!(a.contains("\"ok\":true"), "{f}");
    }
}

#[test]
fn out_of_order_and_malformed_requests_are_located_errors_and_the_session_goes_on() {
    let text = std::fs::read_to_string("tests/fixtures/serve/out-of-order.jsonl").unwrap();
    let mut s = Session::new();
    let answers: Vec<Value> = text
        .lines()
        .map(|l| s.handle_line(l.as_bytes()))
        .filter(|a| !a.is_empty())
        .map(|a| serde_json::from_str(&a).unwrap())
        .collect();
    let errors: Vec<(u64, String, Option<String>)> = answers
        .iter()
        .filter(|a| a["ok"] == false)
        .map(error)
        .collect();
    let f = |x: &str| Some(x.to_string());
    let want = vec![
        (1, "handshake".to_string(), f("op")),
        (3, "handshake".into(), f("version")),
        (4, "state".into(), None),
        (5, "state".into(), None),
        (6, "state".into(), None),
        (9, "time".into(), f("at")),
        (10, "bad_value".into(), f("packet")),
        (11, "bad_field".into(), f("at")),
        (12, "bad_value".into(), f("filter")),
        (13, "bad_field".into(), f("node")),
        (14, "state".into(), None),
        (15, "unknown_op".into(), f("op")),
        (16, "bad_value".into(), f("format")),
        (17, "bad_value".into(), f("payload")),
        (18, "missing_field".into(), f("objects")),
        (19, "state".into(), None),
        (20, "json".into(), None),
        (21, "json".into(), None),
    ];
    assert_eq!(errors, want);
    // The blank line 22 has no answer; line 23, after all of that, works.
    let last = answers.last().unwrap();
    assert_eq!(
        (last["line"].as_u64(), &last["fate"]),
        (Some(23), &json!("transmitted"))
    );
    // The restore error names the payload's line and points at the chain.
    let restore = answers.iter().find(|a| a["line"] == 17).unwrap();
    assert!(restore["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("payload:2: no chain named \"NOCHAIN\""));
}

#[test]
fn a_misspelt_field_is_refused_before_the_request_runs() {
    let mut s = session();
    ask(
        &mut s,
        &json!({"op": "node", "objects": KUBE_DNS_TWO_ENDPOINTS}),
    );
    let bad = answer(
        &mut s,
        r#"{"op":"flow","packet":"udp 10.244.0.9:40000 -> 10.96.0.10:53","tarce":true,"id":"q1"}"#,
    );
    assert_eq!(error(&bad), (3, "bad_field".into(), Some("tarce".into())));
    assert_eq!(bad["id"], "q1");
    let ct = ask(&mut s, &json!({"op": "conntrack"}));
    assert_eq!(ct["entries"], json!([]), "the refused flow sent nothing");
}

#[test]
fn a_huge_line_is_refused_without_being_parsed() {
    let mut s = session();
    let huge = vec![b'x'; MAX_REQUEST_BYTES + 1];
    let v: Value = serde_json::from_str(&s.handle_line(&huge)).unwrap();
    assert_eq!(error(&v).1, "too_long");
    let v: Value = serde_json::from_str(&s.handle_line(&[0xff, 0xfe])).unwrap();
    assert_eq!(error(&v).1, "json");
    assert!(v["error"]["message"].as_str().unwrap().contains("UTF-8"));
}

#[test]
fn the_binary_answers_each_line_and_skips_past_a_too_long_one() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        input
            .write_all(b"{\"op\":\"hello\",\"version\":1}\n")
            .unwrap();
        let mut long = vec![b' '; MAX_REQUEST_BYTES + 10];
        long.extend_from_slice(b"{\"op\":\"nope\"}\n");
        input.write_all(&long).unwrap();
        input
            .write_all(b"{\"op\":\"node\"}\r\n\n{\"op\":\"rules\"}\n")
            .unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(error(&lines[1]), (2, "too_long".into(), None));
    assert_eq!(
        (&lines[2]["op"], &lines[2]["ok"]),
        (&json!("node"), &json!(true))
    );
    assert_eq!(
        (&lines[3]["line"], &lines[3]["op"]),
        (&json!(5), &json!("rules"))
    );
}
