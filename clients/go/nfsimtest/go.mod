module github.com/nfsim/nfsim/clients/go/nfsimtest

go 1.19
