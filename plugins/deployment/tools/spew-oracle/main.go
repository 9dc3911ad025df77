// spew-oracle prints what kube-controller-manager v1.20 computes for pod templates: the
// go-spew printing ComputeHash hashes and the pod-template-hash itself, with and without a
// collisionCount. The plugin's unit tests compare against its output (src/hash/golden.json).
//
// Each stdin line is one pod template as JSON (a spec.template as the API server serves it). It
// is decoded as KCM's informers decode it: JSON into the v1.20 Go types, then through protobuf
// (KCM's wire format: empty lists and maps become nil). Output: one JSON object per line.
//
// Built in GOPATH mode against the kubernetes v1.20.2 source tree (its vendor/):
//
//	GOPATH=<gopath whose src/k8s.io/kubernetes is that tree plus this directory> GO111MODULE=off go run .
//
// tools/spew-oracle.sh sets that up without writing into the source tree.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"

	"github.com/davecgh/go-spew/spew"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

type result struct {
	Printing  string `json:"printing"`
	Hash      string `json:"hash"`
	Collision string `json:"hashCollision1"`
}

func hash(t *v1.PodTemplateSpec, collisionCount *int32) (string, string) {
	h := fnv.New32a()
	printer := spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}
	printing := printer.Sprintf("%#v", *t)
	h.Write([]byte(printing))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return printing, rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var decoded v1.PodTemplateSpec
		if err := json.Unmarshal(in.Bytes(), &decoded); err != nil {
			fmt.Fprintln(os.Stderr, "json:", err)
			os.Exit(1)
		}
		wire, err := decoded.Marshal()
		if err != nil {
			fmt.Fprintln(os.Stderr, "protobuf:", err)
			os.Exit(1)
		}
		var t v1.PodTemplateSpec
		if err := t.Unmarshal(wire); err != nil {
			fmt.Fprintln(os.Stderr, "protobuf:", err)
			os.Exit(1)
		}
		one := int32(1)
		printing, h := hash(&t, nil)
		_, c := hash(&t, &one)
		if err := out.Encode(result{printing, h, c}); err != nil {
			os.Exit(1)
		}
	}
}
