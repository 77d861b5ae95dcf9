from roles.gpu_node.tasks import gpu_node

gpu_node()
