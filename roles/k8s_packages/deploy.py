from roles.k8s_packages.tasks import k8s_packages

k8s_packages()
