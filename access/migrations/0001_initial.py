# RoleAssignment moved here from projects (its table keeps its name): state only, no SQL.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('nodepools', '0001_initial'),
        ('projects', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='RoleAssignment',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.CharField(choices=[('system_admin', 'System administrator'), ('department_admin', 'Department administrator'), ('department_viewer', 'Department viewer'), ('project_admin', 'Project administrator'), ('researcher', 'Researcher'), ('viewer', 'Viewer')], max_length=32)),
                        ('scope_type', models.CharField(choices=[('system', 'System'), ('cluster', 'Cluster'), ('department', 'Department'), ('project', 'Project')], max_length=16)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('cluster', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='nodepools.cluster')),
                        ('department', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='role_assignments', to='projects.department')),
                        ('group', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='role_assignments', to='auth.group')),
                        ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='role_assignments', to='projects.project')),
                        ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='role_assignments', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'projects_roleassignment',
                        'ordering': ['scope_type', 'role', 'pk'],
                        'constraints': [
                            models.CheckConstraint(condition=models.Q(models.Q(('user__isnull', False), ('group__isnull', True)), models.Q(('user__isnull', True), ('group__isnull', False)), _connector='OR'), name='role_user_xor_group'),
                            models.CheckConstraint(condition=models.Q(models.Q(('cluster__isnull', True), ('department__isnull', True), ('project__isnull', True), ('scope_type', 'system')), models.Q(('cluster__isnull', False), ('department__isnull', True), ('project__isnull', True), ('scope_type', 'cluster')), models.Q(('cluster__isnull', True), ('department__isnull', False), ('project__isnull', True), ('scope_type', 'department')), models.Q(('cluster__isnull', True), ('department__isnull', True), ('project__isnull', False), ('scope_type', 'project')), _connector='OR'), name='role_scope_matches_type'),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
