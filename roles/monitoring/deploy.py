from roles.monitoring.tasks import monitoring

monitoring()
