/* parser.y -- pure, reentrant bison grammar of the .octo language with locations. Builds the
 * syntax tree of ast.h; all meaning is given by sema.c. Syntax errors are reported with the
 * expected tokens ("parse.error detailed") and the parser recovers at statement and item
 * boundaries so one run reports several errors. */
%define api.pure full
%define api.prefix {fe_yy}
%define parse.error detailed
%define api.location.type {fe_loc}
%locations
%param {yyscan_t scanner}
%parse-param {fe_parser *p}

%code requires {
#include "ast.h"
typedef void *yyscan_t;

/* List under construction: first and last node. */
typedef struct fe_list {
  void *head; /* first node */
  void *tail; /* last node */
} fe_list;

/* Spans of rules: from the first symbol's start to the last one's end, in the same file. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                                               \
  do {                                                                                           \
    if (N) {                                                                                     \
      (Cur) = YYRHSLOC(Rhs, 1);                                                                  \
      (Cur).last_line = YYRHSLOC(Rhs, N).last_line;                                              \
      (Cur).last_column = YYRHSLOC(Rhs, N).last_column;                                         \
    } else {                                                                                     \
      (Cur) = YYRHSLOC(Rhs, 0);                                                                  \
      (Cur).first_line = (Cur).last_line;                                                        \
      (Cur).first_column = (Cur).last_column;                                                    \
    }                                                                                            \
  } while (0)
}

%code {
#include "lexer.h"

static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, fe_parser *p, const char *msg) {
  (void)scanner;
  p->syntax_errors++;
  if (!p->stopped) diag_error(p->d, fe_diag_loc(*loc), "%s", msg);
}

/* Append node n (whose first member chain is 'next') to list l. */
#define APPEND(l, n)                                                                             \
  do {                                                                                           \
    if ((l).tail) (l).tail->next = (n); else (l).head = (n);                                     \
    (l).tail = (n);                                                                              \
  } while (0)
#define NEW(T) ((T *)arena_alloc(p->a, sizeof(T)))
}

%initial-action {
  @$.file = p->file;
  @$.first_line = @$.last_line = 1;
  @$.first_column = @$.last_column = 1;
}

%union {
  const char *str;
  bool boolean;
  fe_num number;
  fe_value value;
  fe_assign *assign;
  fe_item *item;
  fe_stmt *stmt;
  fe_letter *letter;
  struct { fe_assign *head, *tail; } alist;
  struct { fe_item *head, *tail; } ilist;
  struct { fe_stmt *head, *tail; } slist;
  struct { fe_letter *head, *tail; } llist;
  struct { fe_elem *head, *tail; } elist;
  char ch;
}

%token KW_MODEL "'model'" KW_BLOCK "'block'" KW_DEVICE "'device'" KW_CLUSTER "'cluster'"
%token KW_TRAIN "'train'" KW_IMPORT "'import'" KW_PROFILE "'profile'" KW_LAYER "'layer'"
%token KW_REPEAT "'repeat'" KW_USE "'use'" KW_PATTERN "'pattern'" KW_LINK "'link'"
%token <str> IDENT "identifier" STRING "string"
%token <number> NUMBER "number"
%token <boolean> BOOLEAN "'true' or 'false'"

%type <slist> stmts
%type <stmt> stmt
%type <ilist> items
%type <item> item
%type <alist> assign_list assign_seq braced_params
%type <assign> assign
%type <value> value
%type <str> key
%type <llist> letters
%type <elist> elems elem_seq
%type <letter> letter_def
%type <ch> letter

%%

file
  : stmts                     { p->stmts = $1.head; }
  ;

stmts
  : %empty                    { $$.head = $$.tail = NULL; }
  | stmts stmt                { $$ = $1; if ($2) APPEND($$, $2); }
  | stmts error               { $$ = $1; }
  ;

stmt
  : KW_IMPORT STRING          { $$ = NEW(fe_stmt); $$->kind = FE_S_IMPORT; $$->loc = @1;
                                $$->name = $2; $$->name_loc = @2; }
  | KW_PROFILE STRING         { $$ = NEW(fe_stmt); $$->kind = FE_S_PROFILE; $$->loc = @1;
                                $$->name = $2; $$->name_loc = @2; }
  | KW_MODEL IDENT '{' items '}' { $$ = NEW(fe_stmt); $$->kind = FE_S_MODEL; $$->loc = @1;
                                $$->name = $2; $$->name_loc = @2; $$->items = $4.head; }
  | KW_BLOCK IDENT '{' items '}' { $$ = NEW(fe_stmt); $$->kind = FE_S_BLOCK; $$->loc = @1;
                                $$->name = $2; $$->name_loc = @2; $$->items = $4.head; }
  | KW_DEVICE IDENT '{' assign_list '}' { $$ = NEW(fe_stmt); $$->kind = FE_S_DEVICE;
                                $$->loc = @1; $$->name = $2; $$->name_loc = @2;
                                $$->assigns = $4.head; }
  | KW_CLUSTER IDENT '{' assign_list '}' { $$ = NEW(fe_stmt); $$->kind = FE_S_CLUSTER;
                                $$->loc = @1; $$->name = $2; $$->name_loc = @2;
                                $$->assigns = $4.head; }
  | KW_TRAIN '{' assign_list '}' { $$ = NEW(fe_stmt); $$->kind = FE_S_TRAIN; $$->loc = @1;
                                $$->name = "train"; $$->name_loc = @1; $$->assigns = $3.head; }
  ;

items
  : %empty                    { $$.head = $$.tail = NULL; }
  | items item                { $$ = $1; APPEND($$, $2); }
  | items error               { $$ = $1; }
  ;

item
  : assign                    { $$ = NEW(fe_item); $$->kind = FE_I_ASSIGN; $$->loc = @1;
                                $$->assign = $1; }
  | KW_LAYER IDENT ':' IDENT braced_params
                              { $$ = NEW(fe_item); $$->kind = FE_I_LAYER; $$->loc = @1;
                                $$->name = $2; $$->name_loc = @2; $$->kind_name = $4;
                                $$->kind_loc = @4; $$->params = $5.head; }
  | KW_REPEAT NUMBER '{' items '}'
                              { $$ = NEW(fe_item); $$->kind = FE_I_REPEAT; $$->loc = @1;
                                $$->count = $2.integral && !$2.unit ? $2.num : -1;
                                $$->count_text = $2.text;
                                $$->count_loc = @2; $$->body = $4.head; }
  | KW_USE IDENT              { $$ = NEW(fe_item); $$->kind = FE_I_USE; $$->loc = @1;
                                $$->name = $2; $$->name_loc = @2; }
  | KW_PATTERN STRING '{' letters '}'
                              { $$ = NEW(fe_item); $$->kind = FE_I_PATTERN; $$->loc = @1;
                                $$->pattern = $2; $$->pattern_loc = @2;
                                $$->letters = $4.head; }
  ;

braced_params
  : %empty                    { $$.head = $$.tail = NULL; }
  | '{' assign_list '}'       { $$ = $2; }
  ;

letters
  : letter_def                { $$.head = $$.tail = NULL; APPEND($$, $1); }
  | letters letter_def        { $$ = $1; APPEND($$, $2); }
  | letters ',' letter_def    { $$ = $1; APPEND($$, $3); }
  ;

letter_def
  : letter '=' IDENT braced_params
                              { $$ = NEW(fe_letter); $$->letter = $1; $$->loc = @1;
                                $$->target = $3; $$->target_loc = @3; $$->params = $4.head; }
  ;

letter
  : IDENT                     { $$ = $1[0];
                                if ($1[1]) diag_error(p->d, fe_diag_loc(@1),
                                  "pattern letter '%s' must be a single character", $1); }
  | '*'                       { $$ = '*'; }
  | '-'                       { $$ = '-'; }
  | '+'                       { $$ = '+'; }
  ;

assign_list
  : %empty                    { $$.head = $$.tail = NULL; }
  | assign_seq                { $$ = $1; }
  | assign_seq ','            { $$ = $1; }
  ;

assign_seq
  : assign                    { $$.head = $$.tail = NULL; APPEND($$, $1); }
  | assign_seq assign         { $$ = $1; APPEND($$, $2); }
  | assign_seq ',' assign     { $$ = $1; APPEND($$, $3); }
  ;

assign
  : key '=' value             { $$ = NEW(fe_assign); $$->key = $1; $$->key_loc = @1;
                                $$->val = $3; }
  ;

key
  : IDENT                     { $$ = $1; }
  | KW_MODEL                  { $$ = "model"; }
  | KW_CLUSTER                { $$ = "cluster"; }
  | KW_DEVICE                 { $$ = "device"; }
  ;

value
  : NUMBER                    { memset(&$$, 0, sizeof $$); $$.kind = FE_V_NUMBER; $$.loc = @1;
                                $$.number = $1; }
  | IDENT                     { memset(&$$, 0, sizeof $$); $$.kind = FE_V_IDENT; $$.loc = @1;
                                $$.str = $1; }
  | STRING                    { memset(&$$, 0, sizeof $$); $$.kind = FE_V_STRING; $$.loc = @1;
                                $$.str = $1; }
  | BOOLEAN                   { memset(&$$, 0, sizeof $$); $$.kind = FE_V_BOOL; $$.loc = @1;
                                $$.boolean = $1; }
  | KW_LINK '{' assign_list '}' { memset(&$$, 0, sizeof $$); $$.kind = FE_V_LINK; $$.loc = @1;
                                $$.fields = $3.head; }
  | '[' elems ']'             { memset(&$$, 0, sizeof $$); $$.kind = FE_V_LIST; $$.loc = @$;
                                $$.elems = $2.head; }
  ;

elems
  : %empty                    { $$.head = $$.tail = NULL; }
  | elem_seq                  { $$ = $1; }
  | elem_seq ','              { $$ = $1; }
  ;

elem_seq
  : value                     { fe_elem *e = NEW(fe_elem); e->val = $1;
                                $$.head = $$.tail = NULL; APPEND($$, e); }
  | elem_seq ',' value        { fe_elem *e = NEW(fe_elem); e->val = $3; $$ = $1; APPEND($$, e); }
  ;

%%

fe_stmt *fe_parse(diag_engine *d, arena *a, uint32_t file, int *syntax_errors) {
  const diag_source *src = diag_get_source(d, file);
  fe_parser p = {d, a, file, 1, 1, NULL, 0, 0, false};
  *syntax_errors = 0;
  yyscan_t scanner;
  if (fe_yylex_init_extra(&p, &scanner) != 0) {
    diag_error(d, diag_mkloc(file, 0, 0, 0), "cannot start the scanner");
    return NULL;
  }
  YY_BUFFER_STATE buf = fe_yy_scan_bytes(src->text, (int)src->len, scanner);
  p.line = (int)src->line_base + 1;
  fe_yyparse(scanner, &p);
  fe_yy_delete_buffer(buf, scanner);
  fe_yylex_destroy(scanner);
  *syntax_errors = p.syntax_errors;
  return p.stmts;
}
