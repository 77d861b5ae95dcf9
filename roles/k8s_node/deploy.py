from roles.k8s_node.tasks import k8s_node

k8s_node()
