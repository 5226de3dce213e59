# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · Onde ficam os tensores durante o `generate`
#
# **Objetivo de aprendizagem.** Ao final deste notebook você saberá executar o exemplo "mantenha as entradas na CPU"
# do guia, dizer quais tensores `generate` guarda para si e quais entrega a cada chamada de forward (com seu
# dispositivo, dtype e formato), e contar as assinaturas de entrada que um compilador baseado em tracing encontraria
# com um cache que cresce e com um cache de tamanho fixo.
#
# **Nas palavras do kvlab.** `generate` é um loop em torno de `forward`. Ele mantém seu próprio controle (a sequência
# crescente de ids, a máscara de atenção) no dispositivo dos ids que você passou. Antes de cada chamada, recorta o que
# aquele forward consome (os novos ids, suas posições, uma máscara) e move só isso para o dispositivo do modelo
# (transformers 5.24, `prepare_inputs_for_generation`). O cache não é uma entrada que se move: ele fica onde as
# camadas o escreveram. `kvlab.measure.devices.log_forward_inputs` instala um forward pre-hook no modelo
# (`register_forward_pre_hook(..., with_kwargs=True)`, removido quando o bloco termina) e registra cada tensor que
# cada chamada recebe.
#
# SmolLM2-135M-Instruct, decodificação greedy, em uma máquina **sem acelerador**: aqui tudo está na CPU, o
# que limita o que pode ser medido (a seção 1 diz exatamente o quê).

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import warnings

import ipywidgets as widgets
import torch
import transformers

import kvlab
from kvlab.i18n import cache_kind_label
from kvlab.live import live
from kvlab.measure.devices import log_forward_inputs
from kvlab.plots.forward_inputs import plot_forward_shapes
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
print("modelo:", model.device, model.dtype, "| acelerador disponível:", torch.cuda.is_available(),
      "| transformers", transformers.__version__)

# %% [markdown]
# ## 1. Mantenha os tensores de geração na CPU
#
# O exemplo do guia tokeniza o prompt e **não** chama `.to(model.device)`: as entradas ficam na CPU, `generate` move
# para o dispositivo do modelo apenas o que cada forward consome, e a saída volta no dispositivo das entradas.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("A generation loop keeps its tensors on", return_tensors="pt")  # sem .to(model.device)
output = model.generate(**inputs, do_sample=False, max_new_tokens=5)
print(output.device)
print(tokenizer.decode(output[0]))

# %% [markdown]
# **O que isto mede aqui, e o que não mede.** Nesta máquina o modelo também está na CPU, então `cpu` é a única
# resposta possível: a saída está no dispositivo das entradas, mas todo o resto também está. O argumento do guia é
# sobre aceleradores: em um dispositivo GPU, Neuron ou TPU, a sequência crescente e a máscara ficam na CPU enquanto as
# entradas de cada forward são movidas para o dispositivo, e a saída volta para a CPU. Essa afirmação **não é medida
# aqui** (não há acelerador). O que dá para medir em uma CPU é a outra metade: o que cada chamada de forward recebe e
# como seus formatos mudam de uma chamada para a outra.
#
# **Preveja primeiro.** O mesmo exemplo, agora observado. Geramos 5 tokens depois de um prompt de 7 tokens. Quantas
# chamadas de forward haverá? A primeira chamada recebe os 7 ids do prompt; quantos ids `input_ids` terá em cada
# chamada depois dela?

# %%
guess_calls = None  # chamadas de forward para 5 tokens novos: seu palpite
guess_ids = None  # ids em `input_ids` de cada chamada depois da primeira: seu palpite

# %%
with kvlab.watch(model) as watch, log_forward_inputs(model) as log:
    output = model.generate(**inputs, do_sample=False, max_new_tokens=5)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{log.calls} chamadas de forward para {output.shape[-1] - inputs.input_ids.shape[-1]} tokens novos; o cache "
      f"({watch.trace.meta['cache_class']}) guarda {watch.trace.final_layers()[0]['logical_length']} tokens por camada")
for row in log.table():
    print(f"chamada {row['call']}: {row['name']:<22} {row['device']:<5} {row['dtype']:<8} {row['shape']}")
print("dispositivos vistos, por entrada:", log.devices())

# %%
# NBVAL_CHECK_OUTPUT
(later_ids,) = set(log.lengths("input_ids"))  # o comprimento de input_ids, um valor para cada chamada depois do pré-preenchimento
display(score(guess_calls, log.calls, kind="count", label="chamadas de forward:"))
display(score(guess_ids, later_ids, kind="count", label="ids em input_ids, em cada chamada depois da primeira:"))

# %% [markdown]
# Cinco forwards para cinco tokens: o pré-preenchimento (prefill) produz o primeiro token, e cada chamada seguinte
# produz mais um. O `forward` nunca mais vê a sequência inteira: depois do pré-preenchimento, recebe um id `(1, 1)`,
# sua posição e o cache, cujas chaves (registradas no início da chamada) crescem uma posição por chamada. O quinto
# token nunca volta a entrar no modelo, então o cache termina com 7 + 4 = 11 tokens por camada. Nenhuma máscara de
# atenção chega ao modelo: a máscara do tokenizer é toda de uns (não há padding), então `generate` a descarta (o
# transformers define `attention_mask` como None quando todas as entradas valem 1) e o próprio modelo monta sua
# máscara causal. Nesta máquina só com CPU, todo dispositivo é `cpu`.

# %% [markdown]
# ## 2. Um cache de formato fixo: o que um compilador baseado em tracing vê
#
# Um backend baseado em tracing transforma um forward em um grafo especializado para as suas entradas. O
# `torch.compile` cria guardas sobre os formatos, dtypes e dispositivos delas e recompila quando uma guarda falha; por
# padrão, depois que um formato muda, ele tenta um grafo que deixe esse tamanho variar (fonte: documentação do
# PyTorch, "Dealing with Recompilations", no modelo de programação do torch.compile). CUDA graphs reexecutam um único
# formato capturado, em endereços de memória fixos (fonte: guia de CUDA Graph da NVIDIA, "PyTorch CUDA Graph
# Integration"). De um jeito ou de outro, cada assinatura de entrada nova é um possível tracing novo.
#
# **Preveja primeiro.** Geramos 13 tokens novos: 13 chamadas de forward, o pré-preenchimento e depois 12 chamadas de
# decodificação. Nessas 12 chamadas de decodificação, quantas assinaturas de entrada distintas o cache padrão vai
# produzir? E com `cache_implementation="static"`?

# %%
guess_dynamic = None  # assinaturas distintas nas 12 chamadas de decodificação, cache padrão: seu palpite
guess_static = None  # o mesmo com cache_implementation="static": seu palpite

# %%
vars(model).pop("_previous_max_cache_length", None)  # esquece os tamanhos estáticos anteriores ("Experimente" abaixo mostra por quê)
logs = {}
with log_forward_inputs(model) as logs["dinâmico (padrão)"]:
    model.generate(**inputs, do_sample=False, max_new_tokens=13)
with log_forward_inputs(model) as logs['cache_implementation="static"']:
    model.generate(**inputs, do_sample=False, max_new_tokens=13, cache_implementation="static")

# %%
# NBVAL_CHECK_OUTPUT
for kind, kind_log in logs.items():
    distinct, calls = kind_log.decoding_signatures()
    print(f"{kind:>29}: {distinct} tipo{'s' * (distinct != 1)} de assinatura em {calls} chamadas de decodificação "
          f"({kind_log.distinct_signatures()} contando o pré-preenchimento); entradas: {kind_log.names()}")
static_log = logs['cache_implementation="static"']
print("estático, chamada 1:", [(r.name, r.dtype, r.shape) for r in static_log if r.call == 1])

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_dynamic, logs["dinâmico (padrão)"].decoding_signatures()[0], kind="count",
              label="cache padrão, assinaturas de decodificação distintas:"))
display(score(guess_static, static_log.decoding_signatures()[0], kind="count",
              label="cache estático, assinaturas de decodificação distintas:"))

# %%
plot_forward_shapes(logs, title="Comprimento da sequência de cada entrada do forward, por chamada")

# %% [markdown]
# Com o `DynamicCache` padrão, as chaves do cache crescem uma posição por chamada, então cada uma das 12 chamadas de
# decodificação tem uma assinatura própria: um backend baseado em tracing refaria o tracing a cada passo (ou
# recorreria a formatos dinâmicos). Com `cache_implementation="static"`, o cache aloca suas posições de antemão:
# `generate` o dimensiona em `max_length - 1` = 7 + 13 - 1 = 19 posições (os 7 tokens do prompt e os 12 novos que
# voltam a entrar no modelo, como mostram os formatos da chamada 1) e monta uma máscara booleana 4-D com essa mesma
# largura fixa, `(1, 1, 1, 19)`, de modo que todas as 12 chamadas de decodificação compartilham **uma única**
# assinatura: um grafo, capturado uma vez e reexecutado a cada passo. O pré-preenchimento acrescenta uma assinatura
# própria nas duas execuções (os títulos da figura o deixam de fora; contando com ele, são 13 e 2). Na figura, as
# entradas que têm o mesmo comprimento em todas as chamadas (`input_ids` e `position_ids`; as chaves do cache
# estático e a sua máscara) são desenhadas um pouco afastadas na horizontal, para que uma não esconda a outra. É por
# isso que o guia combina o cache estático com `torch.compile`, e é por isso que `generate` mantém seus próprios
# tensores crescentes fora do caminho que passa pelo tracing.

# %% [markdown]
# ### Experimente: assinaturas por cache e por comprimento
#
# Escolha um cache e um número de tokens novos: a figura executa de novo `generate` sobre o prompt de 7 tokens sob
# `log_forward_inputs` e desenha o comprimento de cada entrada, chamada a chamada.
#
# Com `"static"`, repare na largura: `generate` cria cada novo cache estático com o maior `max_cache_len` que já usou
# neste modelo até agora (o transformers o guarda, `_prepare_static_cache`, para que um grafo compilado possa ser
# reutilizado). Depois da execução de 13 tokens da seção 2, os 8 tokens novos que o controle usa por padrão (que
# precisam de 7 + 7 = 14 posições) ainda recebem 19. (É por isso que a célula da seção 2 começa removendo
# `model._previous_max_cache_length`: executada depois deste controle com mais tokens novos, ela receberia um cache
# mais largo que 19.)

# %%
def signatures(cache_implementation, new_tokens):
    with log_forward_inputs(model) as run_log:
        model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, cache_implementation=cache_implementation)
    return plot_forward_shapes({f'cache_implementation="{cache_implementation}"': run_log},
                               title=f"{new_tokens} tokens novos depois de um prompt de 7 tokens")  # fmt: skip


live(signatures,
     cache_implementation=widgets.Dropdown(options=[(cache_kind_label(k), k) for k in ("dynamic", "static")], value="static", description="cache"),
     new_tokens=widgets.IntSlider(value=8, min=2, max=24, step=2, continuous_update=False, description="tokens novos"))

# %% [markdown]
# ## Principais conclusões
#
# - Deixe as entradas na CPU e `generate` devolve a saída lá: aqui `output.device` é `cpu`, como não poderia deixar de
#   ser em uma máquina sem acelerador. O caso do guia com acelerador (entradas do forward movidas para o dispositivo,
#   tensores crescentes deixados na CPU) não é medido aqui.
# - Depois do pré-preenchimento, cada forward recebe um id, sua posição e o cache (e, com um cache estático, uma
#   máscara de largura fixa). Com o cache padrão, o cache cresce a cada chamada; com um cache estático, nenhuma
#   entrada muda de formato.
# - Formatos fixos dão uma única assinatura para toda a decodificação (12 chamadas de decodificação, 1 assinatura
#   aqui; 2 contando o pré-preenchimento), e é disso que os backends de compilação baseados em tracing precisam.
#
# **A seguir:** [10 · Escolha seu cache](10_choose_your_cache.ipynb): a tabela comparativa do guia, medida aqui, e uma
# calculadora do tamanho do KV para modelos grandes.
