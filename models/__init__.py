"""Models of SOLARIS: dataset loaders, traffic files, the FM and VM, training and evaluation."""
