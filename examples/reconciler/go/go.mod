module nfsim.example/reconciler

go 1.21
